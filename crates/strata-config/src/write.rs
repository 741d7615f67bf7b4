//! `Config::to_yaml`: fully expanded, commented, and readable back.

use crate::*;
use std::fmt::Write as _;

const COMMENT_COLUMN: usize = 38;

/// A string as a YAML scalar: plain when unambiguous, else double-quoted.
fn yaml_str(s: &str) -> String {
    let plain_chars = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./+@-".contains(c));
    let first_ok = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '/' || c == '_');
    let reserved = matches!(
        s.to_ascii_lowercase().as_str(),
        "null" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "auto"
    ) || s.parse::<f64>().is_ok();
    if plain_chars && first_ok && !reserved {
        return s.to_string();
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn path_str(p: &Path) -> String {
    yaml_str(&p.to_string_lossy())
}

struct Out(String);

impl Out {
    fn line(&mut self, indent: usize, key: &str, value: &str, comment: &str) {
        let mut l = if value.is_empty() {
            format!("{:indent$}{key}:", "")
        } else {
            format!("{:indent$}{key}: {value}", "")
        };
        if !comment.is_empty() {
            let pad = COMMENT_COLUMN.saturating_sub(l.len()).max(1);
            let _ = write!(l, "{:pad$}# {comment}", "");
        }
        self.0.push_str(&l);
        self.0.push('\n');
    }

    fn section(&mut self, name: &str, comment: &str) {
        if !comment.is_empty() {
            let _ = writeln!(self.0, "\n# {comment}");
        } else {
            self.0.push('\n');
        }
        let _ = writeln!(self.0, "{name}:");
    }

    fn path_list(&mut self, indent: usize, key: &str, list: &[PathBuf], comment: &str) {
        if list.is_empty() {
            self.line(indent, key, "[]", comment);
        } else {
            self.line(indent, key, "", comment);
            for p in list {
                let _ = writeln!(self.0, "{:indent$}  - {}", "", path_str(p));
            }
        }
    }
}

pub(crate) fn to_yaml(c: &Config) -> String {
    let mut o = Out(String::new());
    o.0.push_str("# strata configuration (fully expanded: every key is shown with its value)\n");
    o.0.push_str("# sizes: B, KiB/MiB/GiB (1024-based; K/M/G too), KB/MB/GB (1000-based)\n");

    o.section("node", "");
    o.line(
        2,
        "id",
        &c.node.id.to_string(),
        "0..=65535; carried by bucket and blob ids",
    );

    let d = &c.daemon;
    o.section("daemon", "");
    let socket = d.socket.as_deref().map_or("auto".to_string(), path_str);
    o.line(
        2,
        "socket",
        &socket,
        "auto = $XDG_RUNTIME_DIR/strata/daemon.sock or /tmp/strata-<uid>/daemon.sock",
    );
    let shm = d.shm_prefix.as_deref().map_or("auto".to_string(), yaml_str);
    o.line(
        2,
        "shm_prefix",
        &shm,
        "auto = strata-<uid>-<hash of the socket path>",
    );
    o.line(
        2,
        "log",
        d.log.as_str(),
        "error | warn | info | debug | trace",
    );
    o.line(
        2,
        "log_format",
        d.log_format.as_str(),
        "text | json (one object per line)",
    );
    o.line(
        2,
        "log_size_max",
        &format_size(d.log_size_max_bytes),
        "the detached daemon's <socket>.log is rotated past this, 1MiB..=64GiB",
    );
    o.line(
        2,
        "log_keep",
        &d.log_keep.to_string(),
        "rotated log files kept (<socket>.log.1 newest), 1..=100",
    );
    o.line(2, "clients_max", &d.clients_max.to_string(), "1..=4096");
    o.line(
        2,
        "channels_per_client_max",
        &d.channels_per_client_max.to_string(),
        "1..=1024",
    );
    o.line(
        2,
        "ring_depth",
        &d.ring_depth.to_string(),
        "power of two, 2..=4096",
    );
    o.line(
        2,
        "spin",
        &format_duration_us(d.spin_us),
        "busy-poll before sleeping, 0..=10ms",
    );
    o.line(
        2,
        "slot_arg_size",
        &format_size(d.slot_arg_size_bytes),
        "4KiB..=1MiB, multiple of 4KiB",
    );
    o.line(
        2,
        "get_index",
        &d.get_index_entries.to_string(),
        "entries of small RAM blobs clients read without a round trip, 0..=524288 (0: off)",
    );
    o.line(
        2,
        "stat_index",
        &d.stat_index_entries.to_string(),
        "entries of file attributes clients stat without a round trip, 0..=524288 (0: off)",
    );
    o.line(
        2,
        "metrics",
        &d.metrics
            .map_or_else(|| "off".to_string(), |a| a.to_string()),
        "ADDR:PORT of the Prometheus endpoint GET /metrics, or off (keep it on loopback)",
    );
    o.line(
        2,
        "group",
        d.group.as_deref().unwrap_or("none"),
        "a Unix group whose members may use this daemon too (set daemon.socket for them), or none",
    );

    o.section(
        "devices",
        "storage tiers, in order; at most one of kind ram",
    );
    for dev in &c.devices {
        let _ = writeln!(o.0, "  - name: {}", yaml_str(&dev.name));
        o.line(4, "kind", dev.kind.as_str(), "ram | dir");
        if let Some(p) = &dev.path {
            o.line(4, "path", &path_str(p), "");
        }
        o.line(4, "capacity", &format_size(dev.capacity_bytes), "");
        o.line(
            4,
            "block_size",
            &format_size(dev.block_size_bytes),
            "power of two, 64B..=1MiB",
        );
        o.line(
            4,
            "bandwidth",
            &format_bandwidth_mib_s(dev.bandwidth_mib_s),
            "",
        );
        o.line(4, "latency", &format_duration_us(dev.latency_us), "");
        o.line(4, "volatile", &dev.volatile.to_string(), "");
    }

    let p = &c.placement;
    o.section("placement", "");
    o.line(
        2,
        "policy",
        p.policy.as_str(),
        "minimize_io_time | round_robin | random",
    );
    o.line(
        2,
        "lease_size",
        &format_size(p.lease_size_bytes),
        "client lease chunk of the RAM arena, 64KiB..=1GiB",
    );
    o.line(
        2,
        "seed",
        &p.seed.to_string(),
        "random policy seed; 0 = from time",
    );

    let m = &c.metadata;
    o.section("metadata", "");
    o.line(2, "buckets_max", &m.buckets_max.to_string(), "");
    o.line(2, "blobs_max", &m.blobs_max.to_string(), "");
    o.line(
        2,
        "bucket_name_max",
        &m.bucket_name_max.to_string(),
        "bytes",
    );
    o.line(2, "blob_name_max", &m.blob_name_max.to_string(), "bytes");
    o.line(
        2,
        "extents_per_blob_max",
        &m.extents_per_blob_max.to_string(),
        "",
    );
    o.line(
        2,
        "tags_per_bucket_max",
        &m.tags_per_bucket_max.to_string(),
        "",
    );
    o.line(
        2,
        "blob_size_max",
        &format_size(m.blob_size_max_bytes),
        "largest native blob, 1MiB..=1PiB",
    );

    let a = &c.adapter;
    o.section("adapter", "");
    o.line(
        2,
        "page_size",
        &format_size(a.page_size_bytes),
        "power of two, 4KiB..=64MiB",
    );
    o.line(
        2,
        "mode",
        a.mode.as_str(),
        "default | scratch | bypass | workflow",
    );
    o.path_list(
        2,
        "include",
        &a.include,
        "absolute prefixes to buffer; [] = current directory",
    );
    o.path_list(2, "exclude", &a.exclude, "");
    if a.prefixes.is_empty() {
        o.line(
            2,
            "prefixes",
            "[]",
            "per-prefix overrides, longest match wins",
        );
    } else {
        o.line(
            2,
            "prefixes",
            "",
            "per-prefix overrides, longest match wins",
        );
        for pre in &a.prefixes {
            let _ = writeln!(o.0, "    - path: {}", path_str(&pre.path));
            if let Some(mode) = pre.mode {
                o.line(6, "mode", mode.as_str(), "");
            }
            if let Some(ps) = pre.page_size_bytes {
                o.line(6, "page_size", &format_size(ps), "");
            }
            if pre.fsync_relaxed {
                o.line(
                    6,
                    "fsync",
                    "relaxed",
                    "fsync returns once buffered (not durable!)",
                );
            }
        }
    }

    let f = &c.flush;
    o.section("flush", "");
    o.line(2, "enabled", &f.enabled.to_string(), "");
    o.line(2, "interval", &format_duration_us(f.interval_ms * 1e3), "");
    o.line(
        2,
        "threads",
        &f.threads.to_string(),
        "1..=64; the flusher adapts how many run at once to the destination",
    );
    o.line(
        2,
        "bandwidth_max",
        &format_bandwidth_mib_s(f.bandwidth_max_mib_s),
        "0 = unlimited",
    );
    o.line(
        2,
        "verify",
        &f.verify.to_string(),
        "read flushed pages back and compare checksums",
    );
    o.line(
        2,
        "stall_warn",
        &format_duration_us(f.stall_warn_ms * 1e3),
        "a flush in flight this long is reported as stalled (hung mount)",
    );
    o.line(
        2,
        "stop_give_up",
        &format_duration_us(f.stop_give_up_ms * 1e3),
        "at stop, a file failing this long is kept in the journal, or the stop refused",
    );
    o.line(
        2,
        "busy_window",
        &format_duration_us(f.busy_window_ms * 1e3),
        "clients wrote this recently: the drain yields (0 = never)",
    );
    o.line(
        2,
        "busy_jobs",
        &f.busy_jobs.to_string(),
        "background flush jobs at once while clients are busy, 1..=64",
    );
    o.line(
        2,
        "busy_bandwidth_max",
        &format_bandwidth_mib_s(f.busy_bandwidth_max_mib_s),
        "the drain's bandwidth while clients are busy (0 = no cap)",
    );
    o.line(
        2,
        "nice",
        &f.nice.to_string(),
        "CPU niceness of the flush workers, 0..=19",
    );

    let g = &c.organizer;
    o.section("organizer", "");
    o.line(2, "enabled", &g.enabled.to_string(), "");
    o.line(2, "interval", &format_duration_us(g.interval_ms * 1e3), "");
    o.line(
        2,
        "bandwidth_max",
        &format_bandwidth_mib_s(g.bandwidth_max_mib_s),
        "0 = unlimited",
    );
    o.line(
        2,
        "promote_threshold",
        &g.promote_threshold.to_string(),
        "0..=1",
    );
    o.line(
        2,
        "demote_threshold",
        &g.demote_threshold.to_string(),
        "0..=1, below promote_threshold",
    );
    o.line(
        2,
        "recency_window",
        &format_duration_us(g.recency_window_ms * 1e3),
        "half-life of recency in a blob's score",
    );
    o.line(
        2,
        "frequency_window",
        &format_duration_us(g.frequency_window_ms * 1e3),
        "half-life of the decayed access count in a blob's score",
    );
    o.line(
        2,
        "high_water",
        &g.high_water.to_string(),
        "a tier fuller than this demotes its coldest blobs; promotions stop here",
    );
    o.line(
        2,
        "low_water",
        &g.low_water.to_string(),
        "demotion under pressure stops here; below high_water",
    );

    let j = &c.journal;
    o.section(
        "journal",
        "metadata of data on non-volatile tiers, replayed after a crash",
    );
    let en = j.enabled.map_or("auto".to_string(), |b| b.to_string());
    o.line(2, "enabled", &en, "auto = on when a device is non-volatile");
    o.line(
        2,
        "sync_interval",
        &format_duration_us(j.sync_interval_ms * 1e3),
        "unsynced records are fdatasync'ed this often",
    );
    o.line(
        2,
        "compact_min",
        &format_size(j.compact_min_bytes),
        "compact beyond this size (and 2x live records)",
    );
    o.line(
        2,
        "inline_max",
        &format_size(j.inline_max_bytes),
        "fsync'ed pages kept in RAM with their bytes in the journal (0: off)",
    );

    let t = &c.trace;
    o.section("trace", "the I/O log (strata trace)");
    o.line(2, "enabled", &t.enabled.to_string(), "");
    let tp = t
        .path
        .as_ref()
        .map_or("auto".to_string(), |p| p.display().to_string());
    o.line(2, "path", &tp, "auto = <socket>.trace");
    o.line(
        2,
        "size_max",
        &format_size(t.size_max_bytes),
        "the file and its rotated predecessor <path>.1 together",
    );

    let p = &c.prefetch;
    o.section("prefetch", "");
    o.line(2, "enabled", &p.enabled.to_string(), "");
    o.line(
        2,
        "readahead_pages",
        &p.readahead_pages.to_string(),
        "pages read ahead of a sequential file reader; 0 = off",
    );
    o.line(
        2,
        "threads",
        &p.threads.to_string(),
        "1..=16 destination readers",
    );
    o.line(
        2,
        "predict",
        &p.predict.to_string(),
        "promote the blobs that usually follow a blob that is read",
    );
    o.line(
        2,
        "successors_max",
        &p.successors_max.to_string(),
        "successors remembered per blob",
    );
    o.line(
        2,
        "min_count",
        &p.min_count.to_string(),
        "times a successor must have followed before it is promoted",
    );

    let k = &c.cluster;
    o.section(
        "cluster",
        "many nodes (--hosts, --hostfile or a resource manager's variables come first)",
    );
    if k.hosts.is_empty() {
        o.line(
            2,
            "hosts",
            "[]",
            "Slurm hostlists, e.g. node[01-04],gpu3; [] = one node",
        );
    } else {
        o.line(
            2,
            "hosts",
            "",
            "Slurm hostlists; entries may carry =addr and :port",
        );
        for h in &k.hosts {
            let _ = writeln!(o.0, "    - {}", yaml_str(h));
        }
    }
    o.line(2, "port", &k.port.to_string(), "of a host that names none");
    let sf = k
        .secret_file
        .as_ref()
        .map_or("auto".to_string(), |p| path_str(p));
    o.line(
        2,
        "secret_file",
        &sf,
        "auto = ~/.config/strata/cluster.secret (0600)",
    );
    o.line(
        2,
        "call_timeout",
        &format_duration_us(k.call_timeout_ms * 1e3),
        "deadline of every remote call",
    );
    o.line(
        2,
        "heartbeat_interval",
        &format_duration_us(k.heartbeat_interval_ms * 1e3),
        "",
    );
    o.line(
        2,
        "start_timeout",
        &format_duration_us(k.start_timeout_ms * 1e3),
        "cluster start fails, naming the silent nodes, after this",
    );
    o.line(
        2,
        "remote_tier",
        &format_size(k.remote_tier_bytes),
        "memory lent to each other node when its tiers are full (0 = none)",
    );
    o.line(
        2,
        "toward_readers",
        &k.toward_readers.to_string(),
        "move blobs another node keeps reading into the memory it lends (they share its fate)",
    );
    o.line(
        2,
        "files_at_owner",
        &k.files_at_owner.to_string(),
        "files live at the owner of their path: one namespace on every node (issue 15, partial)",
    );
    o.line(
        2,
        "pages_where_written",
        &k.pages_where_written.to_string(),
        "SCRATCH and DEFAULT files' whole pages stay on the node that wrote them, mapped at the owner",
    );
    o.line(
        2,
        "read_replicas",
        &k.read_replicas.to_string(),
        "pages of another node read again here are copied here (checked by generation, dropped first)",
    );
    o.line(
        2,
        "remote_read_ahead",
        &k.remote_read_ahead.to_string(),
        "with read_replicas: a sequential reader's next pages another node holds are fetched into a replica here ahead of it",
    );
    o.line(
        2,
        "shadow_sweep_interval",
        &format_duration_us(k.shadow_sweep_interval_ms * 1e3),
        "how often pages held for files other nodes own are checked against their owners",
    );
    o.line(
        2,
        "tls",
        &k.tls.to_string(),
        "TLS (mutual, rustls) on every connection between daemons",
    );
    let auto = |p: &Option<PathBuf>| p.as_ref().map_or("auto".to_string(), |p| path_str(p));
    o.line(
        2,
        "tls_cert",
        &auto(&k.tls_cert),
        "certificate chain (PEM); auto = cluster-tls.crt next to the secret",
    );
    o.line(2, "tls_key", &auto(&k.tls_key), "its key (PEM, 0600)");
    o.line(
        2,
        "tls_ca",
        &auto(&k.tls_ca),
        "a peer's chain must lead to this CA (host names are not checked)",
    );
    if c.quotas.is_empty() {
        o.0.push_str("\n# byte limits per native bucket or path prefix: none\nquotas: []\n");
    } else {
        o.section(
            "quotas",
            "byte limits per native bucket or path prefix (bytes held in the buffer)",
        );
        for q in &c.quotas {
            match &q.target {
                QuotaTarget::Bucket(b) => {
                    let _ = writeln!(o.0, "  - bucket: {}", yaml_str(b));
                }
                QuotaTarget::Prefix(p) => {
                    let _ = writeln!(o.0, "  - prefix: {}", path_str(p));
                }
            }
            o.line(4, "limit", &format_size(q.limit_bytes), "");
        }
    }
    o.0
}
