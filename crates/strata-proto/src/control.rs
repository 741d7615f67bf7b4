//! The control plane: length-prefixed JSON messages over the daemon's Unix
//! socket. A data client sends `Hello` once and keeps the connection open
//! for its lifetime (the daemon reclaims its leases when it closes); tools
//! send one control request per connection.
//!
//! Frames are a little-endian u32 length followed by that many bytes of
//! JSON; frames larger than `FRAME_BYTES_MAX` are refused.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

pub const FRAME_BYTES_MAX: usize = 16 << 20;
/// Most blob data one forwarded request carries (a larger put goes in
/// pieces; a larger read is answered in parts).
pub const FORWARD_DATA_BYTES_MAX: usize = 8 << 20;
/// Most bytes of a forwarded request's or reply's argument area besides data.
pub const FORWARD_ARG_BYTES_MAX: usize = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlRequest {
    Hello {
        version: u32,
        pid: u32,
        uid: u32,
    },
    Status,
    Stop,
    /// Stop even if unpersisted data must be dropped (`daemon stop --discard`).
    StopDiscard,
    Ping,
    /// Mark every DEFAULT file under `paths` (exact file or directory
    /// prefix; empty = all) urgent for the flusher.
    Flush {
        paths: Vec<String>,
    },
    /// Flush state of the files under `paths`, without side effects.
    FlushState {
        paths: Vec<String>,
    },
    /// Per-file drain state of the DEFAULT files under `paths` (exact file or
    /// directory prefix; empty = all), without side effects.
    DrainStatus {
        paths: Vec<String>,
    },
    /// Stage out the WORKFLOW and DEFAULT files under `paths` (exact file or
    /// directory prefix; empty = all): WORKFLOW files are flushed from now on
    /// like DEFAULT files, all of them urgently and durably. With `evict`,
    /// the clean pages of files already persisted are dropped from the
    /// buffer (reads then go to the destination). Answered with `Stage`.
    StageOut {
        paths: Vec<String>,
        #[serde(default)]
        evict: bool,
    },
    /// Staging state of the DEFAULT and WORKFLOW files under `paths`,
    /// without side effects. Answered with `Stage`.
    StageState {
        paths: Vec<String>,
    },
    /// The shared backing memfd of file `id` (a SCRATCH/WORKFLOW or
    /// unlinked file some process maps shared and writable): answered with
    /// `Backing`, its descriptor passed after the frame (`send_fd`) when
    /// present. With `offer_gen`, the client passes a memfd it filled with
    /// the file's bytes as of the record's modification generation
    /// `offer_gen` after the frame; the daemon adopts it unless the file
    /// changed since (or another backing won meanwhile).
    Backing {
        id: u64,
        #[serde(default)]
        offer_gen: Option<u64>,
    },
    /// An authenticated bulk connection to node `node` (the owner of names
    /// this client uses), dialed by this daemon — the client holds no
    /// cluster secret: answered with `BulkConnected`, the socket's
    /// descriptor passed after the frame (`send_fd`).
    BulkConnect {
        node: u32,
        /// The asking client's id (its hello's `client_id`): the owner keeps
        /// its file holds apart and drops them when it goes.
        #[serde(default)]
        client: u64,
    },
    /// The memory this daemon lends node `node` (a remote tier of that
    /// node's daemon), to read blob bytes its owner moved here for this
    /// node's readers: answered with `Lent`, a read-only descriptor of it
    /// passed after the frame.
    Lent {
        node: u32,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FlushError {
    pub path: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FlushReply {
    pub dirty_files: u64,
    pub dirty_bytes: u64,
    pub flushing_files: u64,
    pub flushed_bytes_total: u64,
    pub errors: Vec<FlushError>,
}

impl FlushReply {
    /// Nothing of the flushed paths is left to write: no dirty file and no
    /// job or clean-up still changing the destination under them.
    pub fn drained(&self) -> bool {
        self.dirty_files == 0 && self.flushing_files == 0
    }

    /// Nothing the flusher can still do: every remaining dirty file has
    /// failed and nothing is being written.
    pub fn only_failures_left(&self) -> bool {
        !self.errors.is_empty()
            && self.flushing_files == 0
            && self.dirty_files <= self.errors.len() as u64
    }
}

/// File-model counters in `StatusReply` (totals since the daemon started).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FileCounters {
    pub files: u64,
    pub dirty_files: u64,
    pub dirty_bytes: u64,
    pub write_bytes_total: u64,
    /// Bytes `FileRead` served from the buffer.
    pub read_hit_bytes_total: u64,
    /// Bytes `FileRead` sent to the destination (read-through).
    pub read_dest_bytes_total: u64,
    pub flushed_bytes_total: u64,
    pub flushed_files_total: u64,
    pub flush_errors_total: u64,
    /// Bytes of clean pages dropped from the buffer under capacity pressure.
    #[serde(default)]
    pub evicted_bytes_total: u64,
    /// Bytes clients wrote straight to the destination (buffer full).
    #[serde(default)]
    pub write_through_bytes_total: u64,
    /// Bytes of read-through and read-ahead pages not kept because keeping
    /// them would have evicted pages not on probation (scan resistance).
    #[serde(default)]
    pub fill_declined_bytes_total: u64,
    /// Clean records dropped because their destination file was changed,
    /// replaced or removed outside strata.
    #[serde(default)]
    pub outside_changes_total: u64,
    /// Dirty files whose destination was changed outside strata before the
    /// flush: the outside version was kept aside (`*.strata-outside-*`).
    #[serde(default)]
    pub conflicts_total: u64,
    /// Age of the oldest unpersisted change (the flush lag), seconds; 0
    /// when nothing is dirty.
    #[serde(default)]
    pub oldest_dirty_s: f64,
    /// Whole pages of SCRATCH files other nodes wrote and published here
    /// (pages where written).
    #[serde(default)]
    pub published_pages_total: u64,
    /// Notices to other nodes that a file they held pages of is gone, not
    /// sent because too many waited (their shadows stay until a sweep).
    #[serde(default)]
    pub shadow_notices_dropped_total: u64,
    /// Shadows (pages held here for files other nodes own) dropped by a
    /// sweep: their owners no longer had the file.
    #[serde(default)]
    pub shadows_swept_total: u64,
    /// Flushed pages whose holder restarted without them, read from the
    /// destination since (`FileRemoteLost`).
    #[serde(default)]
    pub remote_lost_pages_total: u64,
    /// Pages held here for other nodes' files that their owners counted as
    /// flushed: clean since, evictable under capacity pressure.
    #[serde(default)]
    pub shadow_pages_flushed_total: u64,
    /// Bytes of other nodes' pages copied into this node's replicas
    /// (`cluster.read_replicas`: pages read here again).
    #[serde(default)]
    pub replica_write_bytes_total: u64,
    /// Bytes reads served from this node's replicas (not fetched again).
    #[serde(default)]
    pub replica_read_bytes_total: u64,
    /// Replica records dropped to keep their number bounded.
    #[serde(default)]
    pub replicas_dropped_total: u64,
    /// Read-ahead hints of remote pages handed to this node's worker
    /// (`cluster.remote_read_ahead`).
    #[serde(default)]
    pub read_ahead_hints_total: u64,
    /// Read-ahead hints dropped: the worker's queue was full.
    #[serde(default)]
    pub read_ahead_hints_dropped_total: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TierInfo {
    pub index: u32,
    pub name: String,
    pub kind: String,
    /// Data file of a dir tier; empty for the RAM tier.
    pub path: String,
    pub block_bytes: u64,
    pub capacity_bytes: u64,
    pub volatile: bool,
    /// A remote tier's donor node (kind "remote"): read its extents over a
    /// bulk connection to that node.
    #[serde(default)]
    pub node: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HelloReply {
    pub version: u32,
    pub client_id: u64,
    pub node_id: u32,
    pub ctl_segment: String,
    pub client_segment: String,
    pub arena_segment: String,
    pub arena_bytes: u64,
    pub arena_block_bytes: u64,
    pub lease_bytes: u64,
    pub channels: u32,
    pub depth: u32,
    pub arg_bytes: u32,
    pub spin_us: u64,
    /// Index of the RAM tier in `tiers`, if there is one.
    pub ram_tier: Option<u32>,
    pub tiers: Vec<TierInfo>,
    /// The cluster's node names in id order (empty: one node, no cluster):
    /// the client builds the owner ring from them.
    #[serde(default)]
    pub cluster_nodes: Vec<String>,
    /// Files live at the owner of their path (`cluster.files_at_owner`):
    /// the client routes a path's requests there.
    #[serde(default)]
    pub files_at_owner: bool,
    /// `cluster.pages_where_written`: a SCRATCH file's whole pages written
    /// here stay in this node's shadow of the file, published to the owner.
    #[serde(default)]
    pub pages_where_written: bool,
    /// `cluster.read_replicas`: pages of another node this node reads again
    /// are copied into a replica here (issue 15, build 3).
    #[serde(default)]
    pub read_replicas: bool,
    /// `cluster.remote_read_ahead`: a sequential reader of pages another
    /// node holds sends its daemon `ReadAhead` hints (with `read_replicas`).
    #[serde(default)]
    pub remote_read_ahead: bool,
    /// The get index's segment (empty: none): small RAM blobs the client
    /// reads straight from the arena (`strata_transport_shm::index`).
    #[serde(default)]
    pub index_segment: String,
    /// The stat index's segment (empty: none): attributes of quiet file
    /// records the client reads for a stat by path
    /// (`strata_transport_shm::stat_index`).
    #[serde(default)]
    pub stat_segment: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TierStatus {
    pub name: String,
    pub kind: String,
    pub path: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub leased_bytes: u64,
    pub spilled_bytes: u64,
    pub blob_count: u64,
    pub dirty_bytes: u64,
    pub volatile: bool,
    pub bandwidth_mib_s: f64,
    pub latency_us: f64,
    /// A remote tier: blobs dropped because its donor restarted.
    #[serde(default)]
    pub lost_blobs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatusReply {
    pub version: u32,
    pub pid: u32,
    pub node_id: u32,
    pub uptime_s: f64,
    pub socket: String,
    pub clients: u64,
    pub buckets: u64,
    pub blobs: u64,
    pub buckets_max: u64,
    pub blobs_max: u64,
    pub requests_total: u64,
    pub malformed_total: u64,
    pub policy: String,
    pub tiers: Vec<TierStatus>,
    #[serde(default)]
    pub files: FileCounters,
    /// The write-ahead journal (None: no non-volatile tier or disabled).
    #[serde(default)]
    pub journal: Option<JournalStatus>,
    /// The I/O log (None: `trace.enabled` is false).
    #[serde(default)]
    pub trace: Option<TraceStatus>,
    /// Read-ahead and trace-driven prefetching.
    #[serde(default)]
    pub prefetch: PrefetchStatus,
    /// The buffer organizer's counters (None: an older daemon).
    #[serde(default)]
    pub organizer: Option<OrganizerStatus>,
    /// This daemon's view of its cluster (None: one node, no cluster).
    #[serde(default)]
    pub cluster: Option<ClusterStatus>,
    /// The get index (None: off — `daemon.get_index: 0`, no RAM tier, or
    /// the I/O log is on).
    #[serde(default)]
    pub get_index: Option<GetIndexStatus>,
    /// The stat index (None: off — `daemon.stat_index: 0`, or a cluster).
    #[serde(default)]
    pub stat_index: Option<StatIndexStatus>,
    /// The background drain (None: no flusher).
    #[serde(default)]
    pub flush: Option<FlushStatus>,
    /// The Prometheus endpoint, `http://ADDR/metrics` (None: off).
    #[serde(default)]
    pub metrics: Option<String>,
    /// The daemon's log file, rotated (None: its stderr, e.g. a terminal
    /// or a service manager's journal).
    #[serde(default)]
    pub log: Option<String>,
    /// The configured quotas and their use.
    #[serde(default)]
    pub quotas: Vec<QuotaStatus>,
}

/// One quota (`quotas:` in the configuration).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct QuotaStatus {
    /// `bucket NAME` or `prefix PATH`.
    pub rule: String,
    pub limit_bytes: u64,
    pub used_bytes: u64,
}

/// The drain's pace: full speed, or yielding to busy clients.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FlushStatus {
    /// Clients wrote within `busy_window_ms`: at most `busy_jobs` background jobs.
    pub yielding: bool,
    pub busy_window_ms: f64,
    pub busy_jobs: u32,
    /// The drain's bandwidth cap while yielding (0: none).
    #[serde(default)]
    pub busy_bandwidth_max_mib_s: f64,
    /// CPU niceness of the flush workers.
    pub nice: u32,
    pub in_flight: u64,
    /// The adaptive limit on concurrent jobs (bandwidth-aware).
    pub concurrency: u64,
}

/// Small RAM blobs clients read straight from the arena (no round trip).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GetIndexStatus {
    pub entries: u64,
    /// Blobs published now.
    pub published: u64,
    pub published_total: u64,
    /// Gets served without asking the daemon (counted every 100 ms).
    pub direct_reads_total: u64,
}

/// Attributes of quiet file records clients stat without a request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StatIndexStatus {
    pub entries: u64,
    /// Records published now.
    pub published: u64,
    pub published_total: u64,
    /// Entries forgotten because their record changed.
    pub forgotten_total: u64,
}

/// A cluster member's view of the cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClusterStatus {
    /// This node's id, name and cluster address.
    pub node: u32,
    pub name: String,
    pub address: String,
    /// Where the node list came from (`--hosts`, `SLURM_JOB_NODELIST`, …).
    pub source: String,
    pub peers: Vec<PeerStatus>,
    /// `cluster.tls`: connections to other daemons run in TLS.
    #[serde(default)]
    pub tls: bool,
    /// Bulk connections relayed through TLS now (handed to clients, or
    /// served from other nodes).
    #[serde(default)]
    pub tls_relays: u64,
}

/// What one node knows of another (heartbeats).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PeerStatus {
    pub node: u32,
    pub name: String,
    pub address: String,
    /// `up`, `down` (no answer within the call deadline), `starting` (never
    /// answered yet), `mismatch` (answers with another node list).
    pub state: String,
    /// Seconds since its last answer (None: never).
    pub last_seen_s: Option<f64>,
    /// Why the last call failed.
    pub error: String,
    /// Round trip of its heartbeats, µs, smoothed (None: never answered,
    /// or this node).
    #[serde(default)]
    pub rtt_us: Option<f64>,
    /// The boot id of the process answering its heartbeats (another one
    /// than before: the node restarted, and what it held in memory is gone).
    #[serde(default)]
    pub boot_id: Option<u64>,
}

/// The I/O log's state (`trace:` in the configuration).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceStatus {
    /// The trace file; its rotated predecessor is `<path>.1`.
    pub path: String,
    pub size_max_bytes: u64,
    /// Events queued for the writer.
    pub events_total: u64,
    /// Events dropped because the writer's queue was full (never blocks the poller).
    pub dropped_total: u64,
}

/// The prefetcher's counters. *Prefetched* bytes were brought into the
/// buffer (read-ahead from the destination) or promoted to the fastest tier
/// (prediction) before anyone asked; each ends up *used* (read afterwards),
/// *unused* (dropped, overwritten or evicted before any read) or is still
/// *pending*.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PrefetchStatus {
    pub enabled: bool,
    pub readahead_pages: u32,
    pub predict: bool,
    /// Sequential streams being followed.
    pub streams: u64,
    /// Pages asked from the destination ahead of readers.
    pub readahead_pages_total: u64,
    /// Bytes read ahead and inserted into the buffer.
    pub readahead_bytes_total: u64,
    /// Read-ahead pages discarded on arrival (the page appeared, the file
    /// changed, an I/O error, no room).
    pub readahead_discarded_total: u64,
    /// Promotions asked of the organizer for blobs that usually follow a blob just read.
    pub promote_requests_total: u64,
    /// Of those, blobs seen on the fastest tier afterwards.
    pub promoted_blobs_total: u64,
    pub promoted_bytes_total: u64,
    /// Blobs with a successor list in the model.
    pub model_blobs: u64,
    pub prefetched_bytes_total: u64,
    pub used_bytes_total: u64,
    pub unused_bytes_total: u64,
    pub pending_bytes: u64,
}

/// One line of the I/O log (JSON lines in the trace file; `strata trace`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceRecord {
    /// Unix time, nanoseconds.
    pub t_ns: u64,
    /// Process id of the client (0: the daemon itself, e.g. `readahead`).
    pub pid: u32,
    /// `put`, `get`, `delete`, `rename`, `open`, `read`, `write`, `fill`,
    /// `truncate`, `unlink`, `sync`, `readahead`, `promote`, or `dropped`
    /// (`size` = events lost because the queue was full).
    pub op: String,
    /// Bucket name (a file's path for file ops).
    pub bucket: String,
    /// Blob name (empty for file ops and bucket-level ops).
    #[serde(default)]
    pub blob: String,
    /// Offset in the blob or file.
    #[serde(default)]
    pub off: u64,
    /// Bytes asked for (or written).
    #[serde(default)]
    pub size: u64,
    /// Tier that served or received the bytes (`dest`: the destination;
    /// `pending`: a page being read ahead, the reader asks again; empty: none).
    #[serde(default)]
    pub tier: String,
    /// Error name when the op failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<String>,
}

/// The buffer organizer: blobs moved between tiers by score.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OrganizerStatus {
    /// Running (`organizer.enabled` and at least two tiers).
    pub enabled: bool,
    /// 0 = unlimited.
    pub bandwidth_max_mib_s: f64,
    /// Per tier, from bandwidth and latency (1.0 = fastest).
    pub tier_scores: Vec<f64>,
    pub rounds: u64,
    pub promoted_blobs: u64,
    pub promoted_bytes: u64,
    pub demoted_blobs: u64,
    pub demoted_bytes: u64,
    /// Copies thrown away because the blob changed meanwhile.
    pub discarded_moves: u64,
    /// Copies that failed (I/O error, CRC mismatch).
    pub failed_moves: u64,
    /// Planned moves not started (no room on the target, extent limit).
    pub skipped_moves: u64,
    /// Promotion requests (prefetcher), dropped when the queue was full,
    /// and promotions done for them (included in `promoted_*`).
    pub requests_total: u64,
    pub requests_dropped: u64,
    pub requested_promotions: u64,
    pub requests_queued: u64,
    /// Blobs moved toward the node that reads them (onto memory it lends).
    #[serde(default)]
    pub moved_toward_readers: u64,
    pub in_flight: bool,
}

/// The journal of metadata of data on non-volatile tiers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct JournalStatus {
    pub path: String,
    pub file_bytes: u64,
    pub live_records: u64,
    pub written_seq: u64,
    pub synced_seq: u64,
    pub syncs: u64,
    pub compactions: u64,
    /// Freed non-volatile space not reusable yet: waiting for the journal
    /// to record the free and sync (rounded to the tier's blocks).
    pub quarantined_bytes: u64,
    /// fsyncs answered by journaling on a non-volatile tier.
    pub journal_syncs: u64,
    /// fsyncs answered at once because their path has `fsync: relaxed`.
    pub relaxed_syncs: u64,
    /// Bytes of fsync'ed pages kept in RAM whose journal record carries
    /// them (live), and the limit (`journal.inline_max`).
    #[serde(default)]
    pub inline_bytes: u64,
    #[serde(default)]
    pub inline_max_bytes: u64,
    /// Pages made durable inside the journal since start.
    #[serde(default)]
    pub inline_pages: u64,
    pub failed: bool,
    pub error: Option<String>,
    pub replay: ReplayReport,
}

/// What the daemon recovered from the journal at start.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReplayReport {
    pub journal_bytes: u64,
    pub records: u64,
    pub buckets: u64,
    pub files: u64,
    pub blobs: u64,
    pub bytes: u64,
    pub dirty_files: u64,
    /// Ranges of the journal that held no valid record (corruption).
    pub corrupt_ranges: u64,
    pub corrupt_bytes: u64,
    /// Incomplete last record (a crash while appending): expected, harmless.
    pub torn_tail_bytes: u64,
    /// Blob records not applied (unknown tier, out of range, overlap, no bucket).
    pub dropped_blobs: u64,
    /// Sealed blobs whose bytes no longer match their checksum (kept, reported).
    pub crc_mismatches: u64,
    /// Runs of pages other nodes hold, restored to their files' maps.
    #[serde(default)]
    pub held_runs: u64,
    pub elapsed_ms: u64,
    pub messages: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlReply {
    Hello(HelloReply),
    Status(StatusReply),
    Flush(FlushReply),
    Ok,
    Error {
        code: i32,
        message: String,
    },
    Drain(DrainReply),
    Stage(StageReply),
    /// `present`: the backing's descriptor follows the frame. `mod_gen`: the
    /// file's modification generation (what an offer must have read).
    Backing {
        present: bool,
        mod_gen: u64,
    },
    /// A bulk connection to `node` (`name` at `address`) follows the frame;
    /// `timeout_ms` is the cluster's call deadline (the socket's timeouts).
    BulkConnected {
        node: u32,
        name: String,
        address: String,
        timeout_ms: u64,
    },
    /// The memory lent to `node`, in donation `epoch`, `bytes` long; a
    /// read-only descriptor follows the frame.
    Lent {
        node: u32,
        epoch: u32,
        bytes: u64,
    },
}

/// Where a DEFAULT file stands on its way to the destination.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum DrainState {
    /// Has unflushed bytes (or a pending truncation/sync); no job in flight.
    Dirty,
    /// A flush job of the file is in flight.
    Flushing,
    /// Clean: the destination holds everything written.
    Persisted,
    /// The last attempt failed; retried at `retry_in_ms`.
    Failed,
}

impl DrainState {
    pub fn as_str(self) -> &'static str {
        match self {
            DrainState::Dirty => "dirty",
            DrainState::Flushing => "flushing",
            DrainState::Persisted => "persisted",
            DrainState::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DrainFile {
    pub path: String,
    pub state: DrainState,
    pub size_bytes: u64,
    pub dirty_bytes: u64,
    /// Bytes the flusher wrote for this file since the daemon started.
    #[serde(default)]
    pub flushed_bytes_total: u64,
    /// Text of the last flush failure (kept until a flush succeeds).
    #[serde(default)]
    pub error: Option<String>,
    /// `failed`: milliseconds until the next attempt (0 = due now).
    #[serde(default)]
    pub retry_in_ms: Option<u64>,
    /// Consecutive failed attempts.
    #[serde(default)]
    pub failures: u32,
    /// `flushing`: milliseconds since its job was queued (a large value
    /// means a stalled destination, e.g. a hung mount).
    #[serde(default)]
    pub flushing_ms: Option<u64>,
    /// `flushing` for longer than the daemon's `flush.stall_warn`.
    #[serde(default)]
    pub stalled: bool,
    /// `persisted`, and every byte was read back from the destination and
    /// matched the buffer's checksum (`flush.verify`).
    #[serde(default)]
    pub verified: bool,
}

/// Answer to `DrainStatus`. The counts cover every matching file, also
/// those left out of `files` when `truncated`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DrainReply {
    pub files: Vec<DrainFile>,
    /// More files matched than `files` holds (row or byte limit).
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub dirty_files: u64,
    #[serde(default)]
    pub flushing_files: u64,
    #[serde(default)]
    pub failed_files: u64,
    #[serde(default)]
    pub persisted_files: u64,
    /// Dirty bytes of all matching files.
    #[serde(default)]
    pub dirty_bytes: u64,
    /// The daemon's event log (`<socket>.drain.log`); empty if it has none.
    #[serde(default)]
    pub log_path: String,
}

impl DrainReply {
    /// Files not yet persisted.
    pub fn pending_files(&self) -> u64 {
        self.dirty_files + self.flushing_files + self.failed_files
    }
}

/// One file in a `Stage` answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StageFile {
    pub path: String,
    /// Persist mode: `default` or `workflow`.
    pub mode: String,
    /// `persisted` once the destination holds everything written; a WORKFLOW
    /// file not staged out with unflushed bytes is `dirty`.
    pub state: DrainState,
    /// The file was staged out (WORKFLOW files; DEFAULT files are always flushed).
    #[serde(default)]
    pub staged_out: bool,
    pub size_bytes: u64,
    /// Bytes not yet at the destination.
    pub dirty_bytes: u64,
    /// Bytes of the file held in the buffer (its page blobs).
    #[serde(default)]
    pub buffered_bytes: u64,
    #[serde(default)]
    pub error: Option<String>,
}

/// Answer to `StageOut` / `StageState`. Counts cover every matching file,
/// also those left out of `files` when `truncated`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StageReply {
    pub files: Vec<StageFile>,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub dirty_files: u64,
    #[serde(default)]
    pub flushing_files: u64,
    #[serde(default)]
    pub failed_files: u64,
    #[serde(default)]
    pub persisted_files: u64,
    /// SCRATCH files under the paths (never staged out; not in `files`).
    #[serde(default)]
    pub scratch_files: u64,
    #[serde(default)]
    pub dirty_bytes: u64,
    /// Buffered bytes of every matching file (SCRATCH ones included).
    #[serde(default)]
    pub buffered_bytes: u64,
    /// `StageOut`: files newly marked for stage-out or made urgent.
    #[serde(default)]
    pub marked_files: u64,
    /// `StageOut` with `evict`: bytes of clean pages dropped from the buffer.
    #[serde(default)]
    pub evicted_bytes: u64,
}

impl StageReply {
    /// Files not yet persisted.
    pub fn pending_files(&self) -> u64 {
        self.dirty_files + self.flushing_files + self.failed_files
    }
}

pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > FRAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "frame too large",
        ));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)
}

pub fn read_frame<R: Read, T: for<'de> Deserialize<'de>>(r: &mut R) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Sends descriptor `fd` over Unix stream `s` (one byte with SCM_RIGHTS).
pub fn send_fd(
    s: &std::os::unix::net::UnixStream,
    fd: std::os::fd::BorrowedFd<'_>,
) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [fd];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !anc.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptor"));
    }
    let n = rustix::net::sendmsg(
        s,
        &[io::IoSlice::new(&[0x46])],
        &mut anc,
        SendFlags::NOSIGNAL,
    )?;
    if n != 1 {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "descriptor not sent",
        ));
    }
    Ok(())
}

/// Receives one descriptor sent by `send_fd` (a byte without one, or with
/// several, is an error; extra descriptors are closed).
pub fn recv_fd(s: &std::os::unix::net::UnixStream) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let r = rustix::net::recvmsg(
        s,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if r.bytes != 1 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "no descriptor",
        ));
    }
    let mut got: Vec<std::os::fd::OwnedFd> = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            got.extend(fds);
        }
    }
    if got.len() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} descriptors where one was expected", got.len()),
        ));
    }
    Ok(got.pop().expect("one"))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_descriptor_crosses_a_unix_stream_after_a_frame() {
        use std::io::{Seek, SeekFrom};
        use std::os::fd::AsFd;
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut f = tempfile_in_tmp();
        f.write_all(b"shared bytes").unwrap();
        write_frame(
            &mut a,
            &ControlReply::Backing {
                present: true,
                mod_gen: 7,
            },
        )
        .unwrap();
        send_fd(&a, f.as_fd()).unwrap();
        let r: ControlReply = read_frame(&mut b).unwrap();
        assert_eq!(
            r,
            ControlReply::Backing {
                present: true,
                mod_gen: 7
            }
        );
        let mut g = std::fs::File::from(recv_fd(&b).unwrap());
        g.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        g.read_to_string(&mut s).unwrap();
        assert_eq!(s, "shared bytes");
        // a byte without a descriptor is refused
        a.write_all(&[0]).unwrap();
        assert!(recv_fd(&b).is_err());
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let fd = rustix::fs::memfd_create("strata-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        std::fs::File::from(fd)
    }
    #[test]
    fn frame_roundtrip() {
        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &ControlRequest::Hello {
                version: 1,
                pid: 2,
                uid: 3,
            },
        )
        .unwrap();
        let back: ControlRequest = read_frame(&mut buf.as_slice()).unwrap();
        assert_eq!(
            back,
            ControlRequest::Hello {
                version: 1,
                pid: 2,
                uid: 3
            }
        );
    }
    #[test]
    fn drain_reply_defaults() {
        let r: ControlReply = serde_json::from_str(r#"{"type":"drain","files":[{"path":"/a","state":"failed","size_bytes":1,"dirty_bytes":1}]}"#).unwrap();
        let ControlReply::Drain(d) = r else {
            panic!("{r:?}")
        };
        assert_eq!(d.files[0].state, DrainState::Failed);
        assert!(!d.truncated && d.files[0].error.is_none());
        let q: ControlRequest =
            serde_json::from_str(r#"{"type":"drain_status","paths":[]}"#).unwrap();
        assert_eq!(q, ControlRequest::DrainStatus { paths: vec![] });
    }
    #[test]
    fn stage_messages_roundtrip() {
        let q: ControlRequest =
            serde_json::from_str(r#"{"type":"stage_out","paths":["/a"]}"#).unwrap();
        assert_eq!(
            q,
            ControlRequest::StageOut {
                paths: vec!["/a".into()],
                evict: false
            }
        );
        let r = ControlReply::Stage(StageReply {
            dirty_files: 2,
            failed_files: 1,
            ..StageReply::default()
        });
        let back: ControlReply = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let ControlReply::Stage(s) = back else {
            panic!()
        };
        assert_eq!(s.pending_files(), 3);
    }
    #[test]
    fn oversized_frame_refused() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&(u32::MAX).to_le_bytes());
        assert!(read_frame::<_, ControlRequest>(&mut buf.as_slice()).is_err());
    }
    #[test]
    fn garbage_frame_is_an_error() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&3u32.to_le_bytes());
        buf.extend_from_slice(b"xyz");
        assert!(read_frame::<_, ControlRequest>(&mut buf.as_slice()).is_err());
    }
}

/// What a stop did with data it could not write to the destination: the
/// daemon writes it next to its socket (`<socket>.stop.json`) before it
/// exits — or, when it refuses to stop, while it keeps running.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StopReport {
    /// "stopped" (everything persisted), "kept" (some files kept on a
    /// non-volatile tier for the next daemon), "refused" (the daemon keeps
    /// running: data would be lost), "discarded" (lost, as asked).
    pub outcome: String,
    pub files: Vec<StopFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StopFile {
    pub path: String,
    /// Bytes not at the destination.
    pub bytes: u64,
    /// Why the flush failed.
    pub error: String,
    /// Durable on a non-volatile tier (journal): flushed by the next daemon.
    pub kept: bool,
}

/// Where the daemon of `socket` writes its [`StopReport`].
pub fn stop_report_path(socket: &std::path::Path) -> std::path::PathBuf {
    let mut s = socket.as_os_str().to_os_string();
    s.push(".stop.json");
    std::path::PathBuf::from(s)
}
