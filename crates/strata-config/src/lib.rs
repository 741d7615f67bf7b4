//! # strata-config
//!
//! One job: turn **one YAML file** (plus `STRATA_*` environment overrides)
//! into a validated [`Config`] for the strata daemon and its clients, with
//! zero-config defaults derived from the machine.
//!
//! ## Invariants
//!
//! * **A `Config` that a constructor hands out has passed [`Config::validate`].**
//!   [`Config::from_yaml_str`], [`Config::load`], [`Config::load_effective`],
//!   [`Config::machine_default`] and [`Config::apply_env`] all validate before
//!   returning (`apply_env` leaves the config untouched on error). The fields
//!   are public for reading; code that mutates them must call `validate()`
//!   again before relying on the invariants.
//! * Every YAML key is optional and has a default; unknown keys anywhere are
//!   errors. Every error is a [`ConfigError`] naming the origin (file name or
//!   `environment`), the dotted key path (`devices[1].capacity`) or the
//!   environment variable, and — for files — the source line.
//! * Quantities carry their unit in the field name (`capacity_bytes`,
//!   `latency_us`, `bandwidth_mib_s`, `interval_ms`); the YAML uses short keys
//!   with human units (`capacity: 4GiB`, `latency: 100us`), see [`parse_size`],
//!   [`parse_duration_us`] and [`parse_bandwidth_mib_s`].
//! * [`Config::to_yaml`] writes a fully expanded, commented file that reads
//!   back into an equal `Config`.
//!
//! ## YAML schema (defaults shown)
//!
//! ```yaml
//! node: { id: 0 }
//! daemon: { socket: auto, shm_prefix: auto, log: info, clients_max: 256,
//!           channels_per_client_max: 64, ring_depth: 64, spin: 50us, slot_arg_size: 8KiB,
//!           get_index: 262144, stat_index: 32768 }
//! devices:            # absent = derived from the machine, see Config::machine_default
//!   - { name: ram, kind: ram, capacity: 4GiB, block_size: 64B, bandwidth: 8GiB/s, latency: 1us, volatile: true }
//!   - { name: disk0, kind: dir, path: ~/.cache/strata/tiers/disk0, capacity: 16GiB,
//!       block_size: 4KiB, bandwidth: 2GiB/s, latency: 100us, volatile: false }
//! placement: { policy: minimize_io_time, lease_size: 4MiB, seed: 0 }
//! metadata: { buckets_max: 65536, blobs_max: 4194304, bucket_name_max: 4096, blob_name_max: 1024,
//!             extents_per_blob_max: 256, tags_per_bucket_max: 64, blob_size_max: 1TiB }
//! adapter: { page_size: 1MiB, mode: default, include: [], exclude: [],
//!            prefixes: [ { path: /data/ckpt, mode: scratch, page_size: 4MiB } ] }
//! flush: { enabled: true, interval: 100ms, threads: 8, bandwidth_max: 0,
//!          busy_window: 200ms, busy_jobs: 1, busy_bandwidth_max: 16MiB/s, nice: 10 }
//! organizer: { enabled: true, interval: 1s, bandwidth_max: 256MiB/s,
//!              promote_threshold: 0.7, demote_threshold: 0.3,
//!              recency_window: 1m, frequency_window: 5m, high_water: 0.9, low_water: 0.75 }
//! trace: { enabled: false, path: auto, size_max: 64MiB }      # the I/O log
//! prefetch: { enabled: true, readahead_pages: 4, threads: 2, predict: true,
//!             successors_max: 4, min_count: 2 }
//! cluster: { hosts: [], port: 7707, secret_file: auto, call_timeout: 10s,
//!            heartbeat_interval: 1s, start_timeout: 1m, remote_tier: 256MiB,
//!            toward_readers: false, files_at_owner: true, pages_where_written: true,
//!            read_replicas: true, remote_read_ahead: false, shadow_sweep_interval: 1m,
//!            tls: false, tls_cert: auto, tls_key: auto, tls_ca: auto }
//! ```
//!
//! ## Deliberately absent
//!
//! * No I/O besides reading the configuration file and asking the kernel
//!   about file systems (`statvfs`, `access`) for machine-derived defaults.
//!   Nothing is created: the daemon creates tier directories, the socket
//!   directory and shared-memory objects, and checks that the RAM tier fits
//!   in `/dev/shm`.
//! * No hot reload, no merging of several files, no YAML anchors-as-merge
//!   (`<<`) support, no writing of files (callers write [`Config::to_yaml`]).
#![forbid(unsafe_code)]

mod env;
mod machine;
mod read;
mod units;
mod validate;
mod write;
mod yaml;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use machine::{dir_capacity_for, machine_devices, machine_dir_path, machine_ram_capacity};
pub use units::{
    format_bandwidth_mib_s, format_duration_us, format_size, parse_bandwidth_mib_s,
    parse_duration_us, parse_size,
};

/// Origin used in errors caused by environment variables.
pub const ENV_ORIGIN: &str = "environment";

// ---------------------------------------------------------------------------
// Errors

/// A configuration error: where it is (origin, key, line) and what is wrong.
///
/// Displays as `strata.yaml:12: devices[1].capacity: invalid size "4GB2" (…)`;
/// the line and the key are left out when unknown/empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    /// File name, or [`ENV_ORIGIN`] for environment variables; may be empty
    /// for errors from [`Config::validate`] on a config built in code.
    pub origin: String,
    /// Dotted key path (`devices[1].capacity`) or environment variable name.
    pub key: String,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            origin: String::new(),
            key: key.into(),
            line: None,
            message: message.into(),
        }
    }

    fn render(&self) -> String {
        let mut s = String::new();
        if !self.origin.is_empty() {
            s.push_str(&self.origin);
            if let Some(line) = self.line {
                s.push_str(&format!(":{line}"));
            }
            s.push_str(": ");
        } else if let Some(line) = self.line {
            s.push_str(&format!("line {line}: "));
        }
        if !self.key.is_empty() {
            s.push_str(&self.key);
            s.push_str(": ");
        }
        s.push_str(&self.message);
        s
    }
}

// ---------------------------------------------------------------------------
// Enums with YAML spellings

macro_rules! yaml_enum {
    ($(#[$m:meta])* $name:ident, $what:literal { $($(#[$vm:meta])* $var:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $var),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            /// The YAML spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$var => $s),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            /// Case-insensitive; `-` is accepted for `_`.
            fn from_str(s: &str) -> Result<Self, String> {
                let norm = s.trim().to_ascii_lowercase().replace('-', "_");
                match norm.as_str() {
                    $($s => Ok($name::$var),)+
                    _ => Err(format!(concat!("invalid ", $what, " {:?} (expected one of: {})"), s, [$($s),+].join(", "))),
                }
            }
        }
    };
}

yaml_enum! {
    /// How the I/O adapter treats files under a prefix.
    Mode, "mode" {
        /// Buffer and flush to the final destination.
        Default = "default",
        /// Buffer only; data never reaches the final destination.
        Scratch = "scratch",
        /// Do not buffer; pass I/O straight through.
        Bypass = "bypass",
        /// Buffer and keep across applications of a workflow; flush at the end.
        Workflow = "workflow",
    }
}

yaml_enum! {
    /// Data placement policy across tiers.
    PlacementPolicy, "placement policy" {
        MinimizeIoTime = "minimize_io_time",
        RoundRobin = "round_robin",
        Random = "random",
    }
}

yaml_enum! {
    /// Kind of a storage tier.
    DeviceKind, "device kind" {
        /// Shared memory owned by the daemon.
        Ram = "ram",
        /// A directory on a local file system.
        Dir = "dir",
    }
}

yaml_enum! {
    /// Daemon log level.
    LogLevel, "log level" {
        Error = "error",
        Warn = "warn",
        Info = "info",
        Debug = "debug",
        Trace = "trace",
    }
}

yaml_enum! {
    /// Daemon log format.
    LogFormat, "log format" {
        Text = "text",
        Json = "json",
    }
}

impl DeviceKind {
    /// Default `block_size`: 64B for RAM, 4KiB for directories.
    pub fn default_block_size_bytes(self) -> u64 {
        match self {
            DeviceKind::Ram => 64,
            DeviceKind::Dir => 4096,
        }
    }
    /// Default `bandwidth`: 8GiB/s for RAM, 2GiB/s for directories.
    pub fn default_bandwidth_mib_s(self) -> f64 {
        match self {
            DeviceKind::Ram => 8192.0,
            DeviceKind::Dir => 2048.0,
        }
    }
    /// Default `latency`: 1us for RAM, 100us for directories.
    pub fn default_latency_us(self) -> f64 {
        match self {
            DeviceKind::Ram => 1.0,
            DeviceKind::Dir => 100.0,
        }
    }
    /// Default `volatile`: true for RAM, false for directories.
    pub fn default_volatile(self) -> bool {
        self == DeviceKind::Ram
    }
}

// ---------------------------------------------------------------------------
// The configuration

/// The whole configuration. See the crate docs for the YAML schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub node: NodeConfig,
    pub daemon: DaemonConfig,
    /// Ordered list of tiers (fastest first, by convention).
    pub devices: Vec<DeviceConfig>,
    pub placement: PlacementConfig,
    pub metadata: MetadataConfig,
    pub adapter: AdapterConfig,
    pub flush: FlushConfig,
    pub organizer: OrganizerConfig,
    #[serde(default)]
    pub journal: JournalConfig,
    #[serde(default)]
    pub trace: TraceConfig,
    #[serde(default)]
    pub prefetch: PrefetchConfig,
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// Byte limits per native bucket and per path prefix (files).
    #[serde(default)]
    pub quotas: Vec<QuotaConfig>,
}

/// What a quota limits: the bytes one native bucket holds, or the bytes of
/// the files under a path prefix held in the buffer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum QuotaTarget {
    Bucket(String),
    Prefix(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaConfig {
    pub target: QuotaTarget,
    /// At least 1 byte.
    pub limit_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NodeConfig {
    /// Node id, carried by bucket and blob ids.
    pub id: u16,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonConfig {
    /// Unix socket path; `None` = `auto` (see [`Config::resolved_socket_path`]).
    pub socket: Option<PathBuf>,
    /// Shared-memory name prefix; `None` = `auto` (see [`Config::resolved_shm_prefix`]).
    pub shm_prefix: Option<String>,
    pub log: LogLevel,
    /// Lines as text or one JSON object per line.
    pub log_format: LogFormat,
    /// The daemon's log file (`<socket>.log`, when started detached) is
    /// rotated past this size, 1MiB..=64GiB.
    pub log_size_max_bytes: u64,
    /// Rotated log files kept (`.1` newest), 1..=100.
    pub log_keep: u32,
    /// 1..=4096.
    pub clients_max: u32,
    /// 1..=1024.
    pub channels_per_client_max: u32,
    /// Power of two, 2..=4096.
    pub ring_depth: u32,
    /// Busy-poll time before sleeping on a futex, 0..=10ms.
    pub spin_us: f64,
    /// Per request slot argument area, 4KiB..=1MiB, multiple of 4KiB.
    pub slot_arg_size_bytes: u64,
    /// Entries of the get index (0..=524288; 0: off): small blobs in RAM
    /// that clients read straight from the arena, without a round trip.
    pub get_index_entries: u32,
    /// Entries of the stat index (0..=524288; 0: off): attributes of
    /// quiet file records that clients read for a stat by path, without a
    /// round trip.
    pub stat_index_entries: u32,
    /// Address of the Prometheus endpoint (`GET /metrics`); `None` = off.
    pub metrics: Option<std::net::SocketAddr>,
    /// A Unix group (name or number) whose members may use this daemon
    /// too; `None` = the daemon's own user only.
    pub group: Option<String>,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: None,
            shm_prefix: None,
            log: LogLevel::Info,
            log_format: LogFormat::Text,
            log_size_max_bytes: 64 << 20,
            log_keep: 4,
            clients_max: 256,
            channels_per_client_max: 64,
            ring_depth: 64,
            spin_us: 50.0,
            slot_arg_size_bytes: 8 << 10,
            get_index_entries: 262_144,
            stat_index_entries: 32_768,
            metrics: None,
            group: None,
        }
    }
}

/// One storage tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceConfig {
    /// `[a-z0-9_-]+`, at most 32 characters, unique.
    pub name: String,
    pub kind: DeviceKind,
    /// Absolute directory (`~/` already expanded); required for `dir`, absent for `ram`.
    pub path: Option<PathBuf>,
    pub capacity_bytes: u64,
    /// Power of two, 64B..=1MiB.
    pub block_size_bytes: u64,
    pub bandwidth_mib_s: f64,
    pub latency_us: f64,
    pub volatile: bool,
}

impl DeviceConfig {
    /// A device of `kind` with the kind's defaults for block size, bandwidth,
    /// latency and volatility.
    pub fn new(
        name: impl Into<String>,
        kind: DeviceKind,
        path: Option<PathBuf>,
        capacity_bytes: u64,
    ) -> Self {
        DeviceConfig {
            name: name.into(),
            kind,
            path,
            capacity_bytes,
            block_size_bytes: kind.default_block_size_bytes(),
            bandwidth_mib_s: kind.default_bandwidth_mib_s(),
            latency_us: kind.default_latency_us(),
            volatile: kind.default_volatile(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementConfig {
    pub policy: PlacementPolicy,
    /// Client lease chunk of the RAM arena, 64KiB..=1GiB, multiple of 4KiB.
    pub lease_size_bytes: u64,
    /// RNG seed for the random policy (0 = from time).
    pub seed: u64,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            policy: PlacementPolicy::MinimizeIoTime,
            lease_size_bytes: 4 << 20,
            seed: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataConfig {
    /// 1..=16777216.
    pub buckets_max: u32,
    /// 1..=4294967295.
    pub blobs_max: u32,
    /// Bytes, 1..=65536.
    pub bucket_name_max: u32,
    /// Bytes, 1..=65536.
    pub blob_name_max: u32,
    /// 1..=65536.
    pub extents_per_blob_max: u32,
    /// 0..=4096.
    pub tags_per_bucket_max: u32,
    /// Largest size of one native blob (a sparse `put_at` far beyond the end
    /// is refused with `TooBig`), 1MiB..=1PiB.
    pub blob_size_max_bytes: u64,
}

impl Default for MetadataConfig {
    fn default() -> Self {
        MetadataConfig {
            buckets_max: 65536,
            blobs_max: 4_194_304,
            bucket_name_max: 4096,
            blob_name_max: 1024,
            extents_per_blob_max: 256,
            tags_per_bucket_max: 64,
            blob_size_max_bytes: 1 << 40,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterConfig {
    /// Power of two, 4KiB..=64MiB.
    pub page_size_bytes: u64,
    pub mode: Mode,
    /// Absolute path prefixes to buffer; empty = current directory at run time.
    pub include: Vec<PathBuf>,
    /// Absolute path prefixes never buffered.
    pub exclude: Vec<PathBuf>,
    /// Per-prefix overrides; longest match wins (see [`AdapterConfig::settings_for`]).
    pub prefixes: Vec<PrefixConfig>,
}

impl Default for AdapterConfig {
    fn default() -> Self {
        AdapterConfig {
            page_size_bytes: 1 << 20,
            mode: Mode::Default,
            include: vec![],
            exclude: vec![],
            prefixes: vec![],
        }
    }
}

/// Override of the adapter settings for files under `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixConfig {
    pub path: PathBuf,
    /// `None` = inherit `adapter.mode`.
    pub mode: Option<Mode>,
    /// `None` = inherit `adapter.page_size`.
    pub page_size_bytes: Option<u64>,
    /// `fsync: relaxed` lets fsync of files under this prefix return once the
    /// data is in the buffer (even RAM); the default (`durable`) waits until
    /// it is journaled on a non-volatile tier or at the destination.
    #[serde(default)]
    pub fsync_relaxed: bool,
}

impl AdapterConfig {
    /// Mode and page size for `file`: the longest `prefixes` entry that is a
    /// path prefix of `file` (component-wise) overrides the global settings.
    pub fn settings_for(&self, file: &Path) -> (Mode, u64) {
        let best = self
            .prefixes
            .iter()
            .filter(|p| file.starts_with(&p.path))
            .max_by_key(|p| p.path.components().count());
        match best {
            Some(p) => (
                p.mode.unwrap_or(self.mode),
                p.page_size_bytes.unwrap_or(self.page_size_bytes),
            ),
            None => (self.mode, self.page_size_bytes),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlushConfig {
    pub enabled: bool,
    /// > 0 and at most one hour.
    pub interval_ms: f64,
    /// 1..=64.
    pub threads: u32,
    /// 0 = unlimited.
    pub bandwidth_max_mib_s: f64,
    /// Read every flushed page back and compare checksums (a mismatch is a
    /// failed flush, retried).
    #[serde(default)]
    pub verify: bool,
    /// A flush job in flight this long is reported as stalled (a hung
    /// destination mount): logged, and shown by `strata drain status`.
    /// > 0 and at most one hour.
    #[serde(default = "stall_warn_ms_default")]
    pub stall_warn_ms: f64,
    /// At stop, how long a file's flush may keep failing before the daemon
    /// stops trying: the data is then kept on a non-volatile tier (journal),
    /// or the stop is refused unless `--discard`. > 0, at most one day.
    #[serde(default = "stop_give_up_ms_default")]
    pub stop_give_up_ms: f64,
    /// Clients wrote within this window: the drain *yields* — at most
    /// `busy_jobs` background jobs at once (urgent flushes and capacity
    /// pressure excepted). 0 = never yield. At most one minute.
    #[serde(default = "busy_window_ms_default")]
    pub busy_window_ms: f64,
    /// 1..=64.
    #[serde(default = "busy_jobs_default")]
    pub busy_jobs: u32,
    /// The drain's bandwidth while it yields (0: no cap beyond `bandwidth_max`).
    #[serde(default = "busy_bandwidth_max_default")]
    pub busy_bandwidth_max_mib_s: f64,
    /// CPU niceness of the flush workers, 0..=19 (higher yields more).
    #[serde(default = "flush_nice_default")]
    pub nice: u32,
}

fn busy_window_ms_default() -> f64 {
    200.0
}

fn busy_jobs_default() -> u32 {
    1
}

/// 16 MiB/s: at 64 the drain through an sshfs destination took a quarter of
/// a 2-core machine while a durable checkpoint wrote (t1 0.49–0.56 of its
/// peer, 0.77–0.97 at 16; BENCHMARKS.md, issue 18 stop 47).
fn busy_bandwidth_max_default() -> f64 {
    16.0
}

fn flush_nice_default() -> u32 {
    10
}

fn stop_give_up_ms_default() -> f64 {
    60_000.0
}

fn stall_warn_ms_default() -> f64 {
    10_000.0
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            enabled: true,
            interval_ms: 100.0,
            threads: 8,
            bandwidth_max_mib_s: 0.0,
            verify: false,
            stall_warn_ms: stall_warn_ms_default(),
            stop_give_up_ms: stop_give_up_ms_default(),
            busy_window_ms: busy_window_ms_default(),
            busy_jobs: busy_jobs_default(),
            busy_bandwidth_max_mib_s: busy_bandwidth_max_default(),
            nice: flush_nice_default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrganizerConfig {
    pub enabled: bool,
    /// > 0 and at most one hour.
    pub interval_ms: f64,
    /// 0 = unlimited.
    pub bandwidth_max_mib_s: f64,
    /// 0..=1.
    pub promote_threshold: f64,
    /// 0..=1, < `promote_threshold`.
    pub demote_threshold: f64,
    /// Half-life of a blob's recency in its score; > 0, at most one day.
    #[serde(default = "recency_window_ms_default")]
    pub recency_window_ms: f64,
    /// Half-life of a blob's decayed access count in its score; > 0, at most one day.
    #[serde(default = "frequency_window_ms_default")]
    pub frequency_window_ms: f64,
    /// A tier above this fraction of its capacity demotes its coldest blobs;
    /// promotions never fill a tier beyond it. `low_water` < it ≤ 1.
    #[serde(default = "high_water_default")]
    pub high_water: f64,
    /// Demotion under pressure stops at this fraction of the capacity; 0..1.
    #[serde(default = "low_water_default")]
    pub low_water: f64,
}

fn recency_window_ms_default() -> f64 {
    60_000.0
}
fn frequency_window_ms_default() -> f64 {
    300_000.0
}
fn high_water_default() -> f64 {
    0.9
}
fn low_water_default() -> f64 {
    0.75
}

impl Default for OrganizerConfig {
    fn default() -> Self {
        OrganizerConfig {
            enabled: true,
            interval_ms: 1000.0,
            bandwidth_max_mib_s: 256.0,
            promote_threshold: 0.7,
            demote_threshold: 0.3,
            recency_window_ms: recency_window_ms_default(),
            frequency_window_ms: frequency_window_ms_default(),
            high_water: high_water_default(),
            low_water: low_water_default(),
        }
    }
}

/// The write-ahead journal of metadata of data on non-volatile tiers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalConfig {
    /// `None` (`auto`) = on when some tier is non-volatile.
    pub enabled: Option<bool>,
    /// Unsynced journal records are fdatasync'ed at least this often; > 0, ≤ 1 min.
    pub sync_interval_ms: f64,
    /// The journal is compacted when it exceeds this size and twice its live records.
    pub compact_min_bytes: u64,
    /// fsync'ed DEFAULT pages may ride inside their journal record (one
    /// write and one fdatasync) while they stay in RAM, up to this many
    /// bytes at once; 0: always copy them to a tier first.
    #[serde(default = "inline_max_default")]
    pub inline_max_bytes: u64,
}

fn inline_max_default() -> u64 {
    256 << 20
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            enabled: None,
            sync_interval_ms: 100.0,
            compact_min_bytes: 64 << 20,
            inline_max_bytes: inline_max_default(),
        }
    }
}

/// Many nodes: who they are (when no launcher or resource manager says)
/// and how daemons talk to each other. Without hosts (here, `--hosts`,
/// `--hostfile` or a resource manager's variables) the daemon is alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Hostlists (Slurm syntax, entries may carry `=addr` and `:port`).
    pub hosts: Vec<String>,
    /// Port of the daemons' cluster service when a host names none; 1..=65535.
    pub port: u16,
    /// The file holding the cluster secret (0600); `None` = `auto`
    /// (see [`Config::resolved_cluster_secret_path`]).
    pub secret_file: Option<PathBuf>,
    /// Deadline of every remote call; 1ms..=1h.
    pub call_timeout_ms: f64,
    /// Heartbeat period between daemons; 1ms..=1min, below `call_timeout`.
    pub heartbeat_interval_ms: f64,
    /// How long `cluster start` waits for every node to agree it is up; ≤ 1h.
    pub start_timeout_ms: f64,
    /// Memory each node lends every other node as a *remote tier* (and
    /// asks of each): where a node's blobs go when its own tiers are full,
    /// before its last tier grows. 0 = no remote tiers; ≤ 1 TiB.
    pub remote_tier_bytes: u64,
    /// Move a blob another node keeps reading onto the memory that node
    /// lends its owner (reads there stay on that node). Off by default: a
    /// moved blob then lives only in the reader node's memory and shares
    /// its fate (that node's death makes the blob unreadable).
    pub toward_readers: bool,
    /// Files of the adapters live at the owner of their absolute path
    /// (record and pages), so every node sees one namespace and no node
    /// reads stale bytes (on by default). Off: each node keeps the files
    /// its processes open, as a single node does — faster for jobs whose
    /// nodes never share a file, and not coherent across nodes.
    pub files_at_owner: bool,
    /// With `files_at_owner`: a SCRATCH or DEFAULT file's whole pages stay
    /// in the buffer of the node that wrote them and the owner maps them
    /// (docs/FILES-ACROSS-NODES.md, steps 2 and 3); readers on other nodes
    /// fetch them from that node, the owner's flush has it write them to
    /// the destination. On by default (since 2026-11-28). Off: every page
    /// lives at the owner (a write sends its bytes there) — reads one node
    /// further are faster on a machine where CPU bounds them.
    pub pages_where_written: bool,
    /// With `pages_where_written`: pages of a file another node holds that
    /// a node reads again are copied into that node's buffer (a *replica*,
    /// served while the owner still maps the pages to the same holder and
    /// generation: never stale; clean, dropped first under pressure). On
    /// by default. Off: every such read crosses the network.
    pub read_replicas: bool,
    /// With `read_replicas`: a process reading a file sequentially whose
    /// next pages another node holds has its node's daemon fetch them into
    /// a replica ahead of it (read-ahead of remote pages, in the
    /// background). Off by default: on this project's 2-core test machine,
    /// where CPU bounds reads across nodes, the extra copies made first
    /// reads slower (BENCHMARKS.md); it pays where the network's latency,
    /// not the CPU, bounds a reader.
    pub remote_read_ahead: bool,
    /// With `pages_where_written`: how often a node asks the owners of the
    /// files whose pages it holds which of those files still exist, and
    /// drops the pages of the others (journaled shadows outlive restarts;
    /// an owner that could not tell this node a file went leaves them);
    /// 100ms..=1d.
    pub shadow_sweep_interval_ms: f64,
    /// TLS (rustls, mutual) on every connection between daemons, beneath
    /// the secret's handshake. Off by default (the secret already keeps
    /// strangers out; TLS adds privacy and integrity on the wire, at a CPU
    /// cost).
    pub tls: bool,
    /// This node's certificate chain (PEM); `None` = `auto` (see
    /// [`Config::resolved_cluster_tls_files`]).
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM, 0600); `None` = `auto`.
    pub tls_key: Option<PathBuf>,
    /// The CA a peer's chain must lead to (PEM); `None` = `auto`.
    pub tls_ca: Option<PathBuf>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            hosts: Vec::new(),
            port: 7707,
            secret_file: None,
            call_timeout_ms: 10_000.0,
            heartbeat_interval_ms: 1_000.0,
            start_timeout_ms: 60_000.0,
            remote_tier_bytes: 256 << 20,
            toward_readers: false,
            files_at_owner: true,
            pages_where_written: true,
            read_replicas: true,
            remote_read_ahead: false,
            shadow_sweep_interval_ms: 60_000.0,
            tls: false,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
        }
    }
}

/// The I/O log: an optional trace of operations written by the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceConfig {
    pub enabled: bool,
    /// Absolute file path; `None` = `auto` (`<socket>.trace`, see [`Config::resolved_trace_path`]).
    pub path: Option<PathBuf>,
    /// The trace file and its one rotated predecessor (`<path>.1`) together stay
    /// below this size; 1MiB..=64GiB.
    pub size_max_bytes: u64,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            enabled: false,
            path: None,
            size_max_bytes: 64 << 20,
        }
    }
}

/// The prefetcher: sequential read-ahead of files and trace-driven promotion of blobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchConfig {
    /// Master switch (false: neither read-ahead nor prediction).
    pub enabled: bool,
    /// Pages read ahead of a detected sequential reader of a file; 0 = no
    /// read-ahead; 0..=1024.
    pub readahead_pages: u32,
    /// Threads reading the destination ahead of readers, 1..=16.
    pub threads: u32,
    /// Trace-driven prediction for the native API: promote the likely
    /// successors of a blob that is read.
    pub predict: bool,
    /// Successors remembered per blob, 1..=16.
    pub successors_max: u32,
    /// Times a successor must have followed before it is promoted, 1..=1000000.
    pub min_count: u32,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        PrefetchConfig {
            enabled: true,
            readahead_pages: 4,
            threads: 2,
            predict: true,
            successors_max: 4,
            min_count: 2,
        }
    }
}

impl Config {
    /// The trace file, resolving `auto` to `<socket>.trace`.
    pub fn resolved_trace_path(&self) -> PathBuf {
        match &self.trace.path {
            Some(p) => p.clone(),
            None => {
                let mut s = self.resolved_socket_path().into_os_string();
                s.push(".trace");
                PathBuf::from(s)
            }
        }
    }

    /// The cluster secret file, resolving `auto` to
    /// `$XDG_CONFIG_HOME/strata/cluster.secret` (else `~/.config/…`): a
    /// home directory is usually shared by a job's nodes.
    pub fn resolved_cluster_secret_path(&self) -> PathBuf {
        if let Some(p) = &self.cluster.secret_file {
            return p.clone();
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        base.join("strata").join("cluster.secret")
    }

    /// The TLS files (certificate chain, key, CA), resolving each `auto` to
    /// a file next to the cluster secret (`cluster-tls.crt`,
    /// `cluster-tls.key`, `cluster-tls-ca.crt`; `strata cluster start`
    /// makes them when none exists).
    pub fn resolved_cluster_tls_files(&self) -> (PathBuf, PathBuf, PathBuf) {
        let secret = self.resolved_cluster_secret_path();
        let dir = secret.parent().unwrap_or(std::path::Path::new("/"));
        let k = &self.cluster;
        (
            k.tls_cert
                .clone()
                .unwrap_or_else(|| dir.join("cluster-tls.crt")),
            k.tls_key
                .clone()
                .unwrap_or_else(|| dir.join("cluster-tls.key")),
            k.tls_ca
                .clone()
                .unwrap_or_else(|| dir.join("cluster-tls-ca.crt")),
        )
    }

    /// Whether the daemon keeps a journal: `journal.enabled`, else whether
    /// some configured tier is non-volatile.
    pub fn journal_enabled(&self) -> bool {
        self.journal
            .enabled
            .unwrap_or_else(|| self.devices.iter().any(|d| !d.volatile))
    }
}

impl AdapterConfig {
    /// Whether fsync of `file` is relaxed (`fsync: relaxed` on the longest matching prefix).
    pub fn fsync_relaxed_for(&self, file: &Path) -> bool {
        self.prefixes
            .iter()
            .filter(|p| file.starts_with(&p.path))
            .max_by_key(|p| p.path.components().count())
            .is_some_and(|p| p.fsync_relaxed)
    }
}

impl FlushConfig {
    pub fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.interval_ms / 1e3)
    }
}

impl OrganizerConfig {
    pub fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.interval_ms / 1e3)
    }
    pub fn recency_window_ns(&self) -> u64 {
        (self.recency_window_ms * 1e6) as u64
    }
    pub fn frequency_window_ns(&self) -> u64 {
        (self.frequency_window_ms * 1e6) as u64
    }
}

impl DaemonConfig {
    pub fn spin(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.spin_us / 1e6)
    }
}

impl Config {
    /// All defaults with the given devices (not validated).
    fn with_devices(devices: Vec<DeviceConfig>) -> Config {
        Config {
            node: NodeConfig::default(),
            daemon: DaemonConfig::default(),
            devices,
            placement: PlacementConfig::default(),
            metadata: MetadataConfig::default(),
            adapter: AdapterConfig::default(),
            flush: FlushConfig::default(),
            organizer: OrganizerConfig::default(),
            journal: JournalConfig::default(),
            trace: TraceConfig::default(),
            prefetch: PrefetchConfig::default(),
            cluster: ClusterConfig::default(),
            quotas: Vec::new(),
        }
    }

    /// Parse a YAML text, fill defaults (machine-derived devices when
    /// `devices` is absent) and validate. `origin` names the text in errors.
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let root = yaml::parse(text).map_err(|(line, msg)| ConfigError {
            origin: origin.into(),
            key: String::new(),
            line: Some(line),
            message: format!("YAML syntax error: {msg}"),
        })?;
        let cfg = read::from_tree(root.as_ref()).map_err(|mut e| {
            e.origin = origin.into();
            e
        })?;
        cfg.validate().map_err(|mut e| {
            e.origin = origin.into();
            e.line = root.as_ref().and_then(|r| r.line_of(&e.key));
            e
        })?;
        Ok(cfg)
    }

    /// Read and parse a file (see [`Config::from_yaml_str`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            origin: origin.clone(),
            key: String::new(),
            line: None,
            message: format!("cannot read the configuration file: {e}"),
        })?;
        Config::from_yaml_str(&text, &origin)
    }

    /// The zero-configuration default: every key at its default and the
    /// devices derived from this machine (see [`machine_devices`]).
    pub fn machine_default() -> Config {
        let cfg = Config::with_devices(machine_devices());
        debug_assert_eq!(cfg.validate(), Ok(()));
        cfg
    }

    /// The configuration a program should use: the file at `path`, else the
    /// file named by `$STRATA_CONFIG` (if set and non-empty), else
    /// [`Config::machine_default`]; then `STRATA_*` environment overrides
    /// (see [`Config::apply_env`]); validated.
    pub fn load_effective(path: Option<&Path>) -> Result<Config, ConfigError> {
        let from_env = std::env::var_os("STRATA_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let mut cfg = match path.map(Path::to_path_buf).or(from_env) {
            Some(p) => Config::load(&p)?,
            None => Config::machine_default(),
        };
        cfg.apply_env(std::env::vars())?;
        Ok(cfg)
    }

    /// Apply `STRATA_*` overrides from `vars` (other variables are ignored),
    /// then validate. On error `self` is left unchanged.
    ///
    /// * Every scalar key `section.key` is `STRATA_SECTION_KEY`
    ///   (`STRATA_DAEMON_SHM_PREFIX`, `STRATA_FLUSH_INTERVAL`, …), with the
    ///   same value syntax as in YAML.
    /// * `STRATA_ADAPTER_INCLUDE` / `STRATA_ADAPTER_EXCLUDE` take a
    ///   colon-separated list of prefixes and replace the list.
    /// * Devices by name: `STRATA_DEVICE_<NAME>_<FIELD>` with `<NAME>` the
    ///   device name uppercased (`-` → `_`) and `<FIELD>` one of `CAPACITY`,
    ///   `PATH`, `BLOCK_SIZE`, `BANDWIDTH`, `LATENCY`, `VOLATILE`.
    /// * Aliases `STRATA_SOCKET`, `STRATA_LOG`, `STRATA_MODE`,
    ///   `STRATA_INCLUDE`, `STRATA_EXCLUDE`; the full name wins if both are set.
    /// * Variables with an empty value are ignored.
    /// * Not configuration: `STRATA_CONFIG`, `STRATA_PRELOAD_LIB`, `STRATA_CLIENT_*`,
    ///   `STRATA_INTERNAL_*`, `STRATA_RUN_*` are ignored; any other unknown
    ///   `STRATA_*` variable is an error (with a "did you mean" hint).
    ///
    /// Errors have origin [`ENV_ORIGIN`], key = the variable name, no line.
    pub fn apply_env(
        &mut self,
        vars: impl Iterator<Item = (String, String)>,
    ) -> Result<(), ConfigError> {
        env::apply_env(self, vars)
    }

    /// Names of every environment variable that [`Config::apply_env`]
    /// understands for this configuration (devices included).
    pub fn env_var_names(&self) -> Vec<String> {
        env::known_names(self)
    }

    /// Check every rule of the schema. Errors carry the dotted YAML key path
    /// and no origin/line (the loaders fill those in).
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self)
    }

    /// Fully expanded, commented YAML that reads back into an equal `Config`.
    pub fn to_yaml(&self) -> String {
        write::to_yaml(self)
    }

    /// The daemon socket path, resolving `auto` to
    /// `$XDG_RUNTIME_DIR/strata/daemon.sock` when `XDG_RUNTIME_DIR` is set
    /// and writable, else `/tmp/strata-<uid>/daemon.sock`.
    pub fn resolved_socket_path(&self) -> PathBuf {
        match &self.daemon.socket {
            Some(p) => p.clone(),
            None => machine::auto_socket_path(),
        }
    }

    /// The shared-memory object name prefix, resolving `auto` to
    /// `strata-<uid>-<hash of the socket path>`: daemons with different
    /// sockets never share shared memory (the daemon also locks the prefix).
    pub fn resolved_shm_prefix(&self) -> String {
        match &self.daemon.shm_prefix {
            Some(p) => p.clone(),
            None => {
                // FNV-1a of the socket path: stable across builds and runs.
                let mut h: u32 = 0x811c_9dc5;
                for b in self.resolved_socket_path().as_os_str().as_encoded_bytes() {
                    h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
                }
                format!("strata-{}-{h:08x}", machine::uid())
            }
        }
    }

    /// The RAM device, if any.
    pub fn ram_device(&self) -> Option<&DeviceConfig> {
        self.devices.iter().find(|d| d.kind == DeviceKind::Ram)
    }

    /// The device named `name`.
    pub fn device(&self, name: &str) -> Option<&DeviceConfig> {
        self.devices.iter().find(|d| d.name == name)
    }
}

#[cfg(test)]
mod tests;
