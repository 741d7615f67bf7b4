//! Conversion of the YAML node tree into a [`Config`], and the scalar setters
//! shared with the environment overrides.

use crate::yaml::{Node, Value};
use crate::*;

/// Every scalar key, as a dotted YAML path. The environment variable of each
/// is `STRATA_` + the path uppercased with `.` → `_`.
pub(crate) const SCALAR_KEYS: &[&str] = &[
    "node.id",
    "daemon.socket",
    "daemon.shm_prefix",
    "daemon.log",
    "daemon.log_format",
    "daemon.log_size_max",
    "daemon.log_keep",
    "daemon.clients_max",
    "daemon.channels_per_client_max",
    "daemon.ring_depth",
    "daemon.spin",
    "daemon.slot_arg_size",
    "daemon.get_index",
    "daemon.stat_index",
    "daemon.metrics",
    "daemon.group",
    "placement.policy",
    "placement.lease_size",
    "placement.seed",
    "metadata.buckets_max",
    "metadata.blobs_max",
    "metadata.bucket_name_max",
    "metadata.blob_name_max",
    "metadata.extents_per_blob_max",
    "metadata.tags_per_bucket_max",
    "metadata.blob_size_max",
    "adapter.page_size",
    "adapter.mode",
    "flush.enabled",
    "flush.interval",
    "flush.threads",
    "flush.bandwidth_max",
    "flush.verify",
    "flush.stall_warn",
    "flush.stop_give_up",
    "flush.busy_window",
    "flush.busy_jobs",
    "flush.busy_bandwidth_max",
    "flush.nice",
    "organizer.enabled",
    "organizer.interval",
    "organizer.bandwidth_max",
    "organizer.promote_threshold",
    "organizer.demote_threshold",
    "organizer.recency_window",
    "organizer.frequency_window",
    "organizer.high_water",
    "organizer.low_water",
    "journal.enabled",
    "journal.sync_interval",
    "journal.compact_min",
    "journal.inline_max",
    "trace.enabled",
    "trace.path",
    "trace.size_max",
    "prefetch.enabled",
    "prefetch.readahead_pages",
    "prefetch.threads",
    "prefetch.predict",
    "prefetch.successors_max",
    "prefetch.min_count",
    "cluster.hosts",
    "cluster.port",
    "cluster.secret_file",
    "cluster.call_timeout",
    "cluster.heartbeat_interval",
    "cluster.start_timeout",
    "cluster.remote_tier",
    "cluster.toward_readers",
    "cluster.files_at_owner",
    "cluster.pages_where_written",
    "cluster.read_replicas",
    "cluster.remote_read_ahead",
    "cluster.shadow_sweep_interval",
    "cluster.tls",
    "cluster.tls_cert",
    "cluster.tls_key",
    "cluster.tls_ca",
];

/// Keys of the `adapter` section that hold lists of paths.
pub(crate) const LIST_KEYS: &[&str] = &["adapter.include", "adapter.exclude"];

/// Keys of a device entry, besides `name` and `kind`.
pub(crate) const DEVICE_FIELDS: &[&str] = &[
    "path",
    "capacity",
    "block_size",
    "bandwidth",
    "latency",
    "volatile",
];

const SECTIONS: &[&str] = &[
    "node",
    "daemon",
    "devices",
    "placement",
    "metadata",
    "adapter",
    "flush",
    "organizer",
    "journal",
    "trace",
    "prefetch",
    "cluster",
    "quotas",
];

// ---------------------------------------------------------------------------
// Scalar parsers (value text → typed value)

fn parse_uint(s: &str, max: u64) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid integer {s:?} (expected a whole number such as 64)"
        ));
    }
    match t.parse::<u64>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(format!("{t} is out of range (at most {max})")),
    }
}

fn parse_u32(s: &str) -> Result<u32, String> {
    parse_uint(s, u32::MAX as u64).map(|v| v as u32)
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(format!("invalid boolean {s:?} (expected true or false)")),
    }
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let ok = !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
        && t.bytes().any(|b| b.is_ascii_digit());
    match t.parse::<f64>() {
        Ok(v) if ok && v.is_finite() => Ok(v),
        _ => Err(format!(
            "invalid number {s:?} (expected a number such as 0.5)"
        )),
    }
}

/// `auto` (`None`) or a path ([`parse_path`]).
fn parse_auto_path(s: &str) -> Result<Option<PathBuf>, String> {
    if s.trim() == "auto" {
        Ok(None)
    } else {
        parse_path(s).map(Some)
    }
}

/// A path: `~` or `~/…` is expanded with `$HOME`. Absoluteness is checked by
/// validation, so that the error can point at the key.
pub(crate) fn parse_path(s: &str) -> Result<PathBuf, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty path".into());
    }
    if t == "~" || t.starts_with("~/") {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("cannot expand {t:?}: HOME is not set"))?;
        let rest = t[1..].trim_start_matches('/');
        let home = PathBuf::from(home);
        return Ok(if rest.is_empty() {
            home
        } else {
            home.join(rest)
        });
    }
    if t.starts_with('~') {
        return Err(format!(
            "cannot expand {t:?}: only ~/ (the current user's home) is supported"
        ));
    }
    Ok(PathBuf::from(t))
}

fn parse_bandwidth_max(s: &str) -> Result<f64, String> {
    if s.trim().eq_ignore_ascii_case("unlimited") {
        return Ok(0.0);
    }
    parse_bandwidth_mib_s(s)
}

/// Set the scalar at dotted `path` (one of [`SCALAR_KEYS`]) from its text.
pub(crate) fn set_scalar(cfg: &mut Config, path: &str, v: &str) -> Result<(), String> {
    let d = &mut cfg.daemon;
    let m = &mut cfg.metadata;
    match path {
        "node.id" => cfg.node.id = parse_uint(v, u16::MAX as u64)? as u16,
        "daemon.socket" => {
            d.socket = if v.trim() == "auto" {
                None
            } else {
                Some(parse_path(v)?)
            }
        }
        "daemon.shm_prefix" => {
            d.shm_prefix = if v.trim() == "auto" {
                None
            } else {
                Some(v.trim().to_string())
            }
        }
        "daemon.log" => d.log = v.parse()?,
        "daemon.log_format" => d.log_format = v.parse()?,
        "daemon.log_size_max" => d.log_size_max_bytes = parse_size(v)?,
        "daemon.log_keep" => d.log_keep = parse_u32(v)?,
        "daemon.clients_max" => d.clients_max = parse_u32(v)?,
        "daemon.channels_per_client_max" => d.channels_per_client_max = parse_u32(v)?,
        "daemon.ring_depth" => d.ring_depth = parse_u32(v)?,
        "daemon.spin" => d.spin_us = parse_duration_us(v)?,
        "daemon.slot_arg_size" => d.slot_arg_size_bytes = parse_size(v)?,
        "daemon.get_index" => d.get_index_entries = parse_u32(v)?,
        "daemon.stat_index" => d.stat_index_entries = parse_u32(v)?,
        "daemon.group" => {
            d.group = match v.trim() {
                "none" | "" => None,
                g if g
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                    && g.len() <= 64 =>
                {
                    Some(g.to_string())
                }
                g => return Err(format!("{g:?} is not a group name or number (or none)")),
            }
        }
        "daemon.metrics" => {
            d.metrics = match v.trim() {
                "off" | "" => None,
                a => Some(a.parse().map_err(|_| {
                    format!("{a:?} is not an address and port (e.g. 127.0.0.1:9464), or off")
                })?),
            }
        }
        "placement.policy" => cfg.placement.policy = v.parse()?,
        "placement.lease_size" => cfg.placement.lease_size_bytes = parse_size(v)?,
        "placement.seed" => cfg.placement.seed = parse_uint(v, u64::MAX)?,
        "metadata.buckets_max" => m.buckets_max = parse_u32(v)?,
        "metadata.blobs_max" => m.blobs_max = parse_u32(v)?,
        "metadata.bucket_name_max" => m.bucket_name_max = parse_u32(v)?,
        "metadata.blob_name_max" => m.blob_name_max = parse_u32(v)?,
        "metadata.extents_per_blob_max" => m.extents_per_blob_max = parse_u32(v)?,
        "metadata.tags_per_bucket_max" => m.tags_per_bucket_max = parse_u32(v)?,
        "metadata.blob_size_max" => m.blob_size_max_bytes = parse_size(v)?,
        "adapter.page_size" => cfg.adapter.page_size_bytes = parse_size(v)?,
        "adapter.mode" => cfg.adapter.mode = v.parse()?,
        "flush.enabled" => cfg.flush.enabled = parse_bool(v)?,
        "flush.interval" => cfg.flush.interval_ms = parse_duration_us(v)? / 1e3,
        "flush.threads" => cfg.flush.threads = parse_u32(v)?,
        "flush.bandwidth_max" => cfg.flush.bandwidth_max_mib_s = parse_bandwidth_max(v)?,
        "flush.verify" => cfg.flush.verify = parse_bool(v)?,
        "flush.stall_warn" => cfg.flush.stall_warn_ms = parse_duration_us(v)? / 1e3,
        "flush.stop_give_up" => cfg.flush.stop_give_up_ms = parse_duration_us(v)? / 1e3,
        "flush.busy_window" => cfg.flush.busy_window_ms = parse_duration_us(v)? / 1e3,
        "flush.busy_jobs" => cfg.flush.busy_jobs = parse_u32(v)?,
        "flush.busy_bandwidth_max" => cfg.flush.busy_bandwidth_max_mib_s = parse_bandwidth_max(v)?,
        "flush.nice" => cfg.flush.nice = parse_u32(v)?,
        "organizer.enabled" => cfg.organizer.enabled = parse_bool(v)?,
        "organizer.interval" => cfg.organizer.interval_ms = parse_duration_us(v)? / 1e3,
        "organizer.bandwidth_max" => cfg.organizer.bandwidth_max_mib_s = parse_bandwidth_max(v)?,
        "organizer.promote_threshold" => cfg.organizer.promote_threshold = parse_fraction(v)?,
        "organizer.demote_threshold" => cfg.organizer.demote_threshold = parse_fraction(v)?,
        "organizer.recency_window" => cfg.organizer.recency_window_ms = parse_duration_us(v)? / 1e3,
        "organizer.frequency_window" => {
            cfg.organizer.frequency_window_ms = parse_duration_us(v)? / 1e3
        }
        "organizer.high_water" => cfg.organizer.high_water = parse_fraction(v)?,
        "organizer.low_water" => cfg.organizer.low_water = parse_fraction(v)?,
        "journal.enabled" => {
            cfg.journal.enabled = if v.trim() == "auto" {
                None
            } else {
                Some(parse_bool(v)?)
            }
        }
        "journal.sync_interval" => cfg.journal.sync_interval_ms = parse_duration_us(v)? / 1e3,
        "journal.compact_min" => cfg.journal.compact_min_bytes = parse_size(v)?,
        "journal.inline_max" => cfg.journal.inline_max_bytes = parse_size(v)?,
        "trace.enabled" => cfg.trace.enabled = parse_bool(v)?,
        "trace.path" => {
            cfg.trace.path = if v.trim() == "auto" {
                None
            } else {
                Some(parse_path(v)?)
            }
        }
        "trace.size_max" => cfg.trace.size_max_bytes = parse_size(v)?,
        "prefetch.enabled" => cfg.prefetch.enabled = parse_bool(v)?,
        "prefetch.readahead_pages" => cfg.prefetch.readahead_pages = parse_u32(v)?,
        "prefetch.threads" => cfg.prefetch.threads = parse_u32(v)?,
        "prefetch.predict" => cfg.prefetch.predict = parse_bool(v)?,
        "prefetch.successors_max" => cfg.prefetch.successors_max = parse_u32(v)?,
        "prefetch.min_count" => cfg.prefetch.min_count = parse_u32(v)?,
        // One hostlist as a scalar (`STRATA_CLUSTER_HOSTS=node[1-4]`); a
        // YAML list of them is read in `from_tree`.
        "cluster.hosts" => {
            cfg.cluster.hosts = if v.trim().is_empty() {
                Vec::new()
            } else {
                vec![v.trim().to_string()]
            }
        }
        "cluster.port" => {
            cfg.cluster.port = u16::try_from(parse_uint(v, u16::MAX as u64)?)
                .map_err(|_| format!("invalid port {v:?}"))?
        }
        "cluster.secret_file" => {
            cfg.cluster.secret_file = if v.trim() == "auto" {
                None
            } else {
                Some(parse_path(v)?)
            }
        }
        "cluster.tls" => cfg.cluster.tls = parse_bool(v)?,
        "cluster.tls_cert" => cfg.cluster.tls_cert = parse_auto_path(v)?,
        "cluster.tls_key" => cfg.cluster.tls_key = parse_auto_path(v)?,
        "cluster.tls_ca" => cfg.cluster.tls_ca = parse_auto_path(v)?,
        "cluster.call_timeout" => cfg.cluster.call_timeout_ms = parse_duration_us(v)? / 1e3,
        "cluster.heartbeat_interval" => {
            cfg.cluster.heartbeat_interval_ms = parse_duration_us(v)? / 1e3
        }
        "cluster.start_timeout" => cfg.cluster.start_timeout_ms = parse_duration_us(v)? / 1e3,
        "cluster.remote_tier" => cfg.cluster.remote_tier_bytes = parse_size(v)?,
        "cluster.toward_readers" => cfg.cluster.toward_readers = parse_bool(v)?,
        "cluster.files_at_owner" => cfg.cluster.files_at_owner = parse_bool(v)?,
        "cluster.pages_where_written" => cfg.cluster.pages_where_written = parse_bool(v)?,
        "cluster.read_replicas" => cfg.cluster.read_replicas = parse_bool(v)?,
        "cluster.remote_read_ahead" => cfg.cluster.remote_read_ahead = parse_bool(v)?,
        "cluster.shadow_sweep_interval" => {
            cfg.cluster.shadow_sweep_interval_ms = parse_duration_us(v)? / 1e3
        }
        _ => return Err(format!("unknown key {path}")),
    }
    Ok(())
}

/// Set one of [`DEVICE_FIELDS`] of a device from its text.
pub(crate) fn set_device_field(dev: &mut DeviceConfig, field: &str, v: &str) -> Result<(), String> {
    match field {
        "path" => dev.path = Some(parse_path(v)?),
        "capacity" => dev.capacity_bytes = parse_size(v)?,
        "block_size" => dev.block_size_bytes = parse_size(v)?,
        "bandwidth" => dev.bandwidth_mib_s = parse_bandwidth_mib_s(v)?,
        "latency" => dev.latency_us = parse_duration_us(v)?,
        "volatile" => dev.volatile = parse_bool(v)?,
        _ => return Err(format!("unknown device field {field}")),
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Tree walking

fn err(key: &str, line: usize, message: impl Into<String>) -> ConfigError {
    ConfigError {
        origin: String::new(),
        key: key.into(),
        line: Some(line),
        message: message.into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The text of a scalar node, or a type error.
fn scalar<'n>(node: &'n Node, key: &str, line: usize) -> Result<&'n str, ConfigError> {
    node.as_str().ok_or_else(|| {
        err(
            key,
            line,
            format!("expected a single value, found {}", node.describe()),
        )
    })
}

/// A mapping being read: tracks which keys were consumed, so that the rest
/// can be reported as unknown.
struct Table<'n> {
    path: String,
    entries: Vec<(&'n str, usize, &'n Node)>,
    used: Vec<bool>,
}

/// One entry taken from a [`Table`]: its value, dotted path and key line.
struct Entry<'n> {
    node: &'n Node,
    path: String,
    line: usize,
}

impl<'n> Table<'n> {
    /// `node` must be a mapping (or null/absent = empty).
    fn new(node: Option<&'n Node>, path: &str, line: usize) -> Result<Table<'n>, ConfigError> {
        let mut entries = Vec::new();
        match node.map(|n| &n.value) {
            None | Some(Value::Null) => {}
            Some(Value::Map(items)) => {
                for (k, v) in items {
                    let name = k.as_str().ok_or_else(|| {
                        err(
                            path,
                            k.line,
                            format!("keys must be plain names, found {}", k.describe()),
                        )
                    })?;
                    if entries.iter().any(|(n, _, _)| *n == name) {
                        return Err(err(&join(path, name), k.line, "duplicate key"));
                    }
                    entries.push((name, k.line, v));
                }
            }
            Some(_) => {
                let what = if path.is_empty() {
                    "the top level"
                } else {
                    path
                };
                let found = node.unwrap().describe();
                return Err(err(
                    path,
                    line,
                    format!("expected a mapping at {what}, found {found}"),
                ));
            }
        }
        let used = vec![false; entries.len()];
        Ok(Table {
            path: path.into(),
            entries,
            used,
        })
    }

    /// Take `key`; a null value counts as absent (the default applies).
    fn take(&mut self, key: &str) -> Option<Entry<'n>> {
        let i = self.entries.iter().position(|(n, _, _)| *n == key)?;
        self.used[i] = true;
        let (_, line, node) = self.entries[i];
        if matches!(node.value, Value::Null) {
            return None;
        }
        Some(Entry {
            node,
            path: join(&self.path, key),
            line,
        })
    }

    /// Error on the first key not taken; `known` lists the valid keys.
    fn finish(self, known: &[&str]) -> Result<(), ConfigError> {
        for (i, (name, line, _)) in self.entries.iter().enumerate() {
            if !self.used[i] {
                let mut msg = format!("unknown key `{name}`");
                if let Some(s) = env::closest(name, known.iter().copied()) {
                    msg.push_str(&format!(" (did you mean `{s}`?)"));
                } else {
                    msg.push_str(&format!(" (expected one of: {})", known.join(", ")));
                }
                return Err(err(&join(&self.path, name), *line, msg));
            }
        }
        Ok(())
    }
}

fn paths_list(e: &Entry<'_>) -> Result<Vec<PathBuf>, ConfigError> {
    let Value::Seq(items) = &e.node.value else {
        return Err(err(
            &e.path,
            e.line,
            format!("expected a list of paths, found {}", e.node.describe()),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let key = format!("{}[{i}]", e.path);
            parse_path(scalar(item, &key, item.line)?).map_err(|m| err(&key, item.line, m))
        })
        .collect()
}

/// `cluster.hosts`: one hostlist, or a list of them.
fn hosts_list(e: &Entry<'_>) -> Result<Vec<String>, ConfigError> {
    let lists: Vec<String> = match &e.node.value {
        Value::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let key = format!("{}[{i}]", e.path);
                scalar(item, &key, item.line).map(|s| s.trim().to_string())
            })
            .collect::<Result<_, _>>()?,
        _ => vec![scalar(e.node, &e.path, e.line)?.trim().to_string()],
    };
    for (i, l) in lists.iter().enumerate() {
        if let Err(x) = strata_cluster::hostlist::expand(l) {
            let line = match &e.node.value {
                Value::Seq(items) => items[i].line,
                _ => e.line,
            };
            return Err(err(&e.path, line, format!("bad hostlist {l:?}: {x}")));
        }
    }
    Ok(lists)
}

fn read_prefixes(e: &Entry<'_>) -> Result<Vec<PrefixConfig>, ConfigError> {
    let Value::Seq(items) = &e.node.value else {
        return Err(err(
            &e.path,
            e.line,
            format!("expected a list of prefixes, found {}", e.node.describe()),
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("{}[{i}]", e.path);
        let mut t = Table::new(Some(item), &path, item.line)?;
        let p = t
            .take("path")
            .ok_or_else(|| err(&path, item.line, "missing key `path`"))?;
        let prefix_path =
            parse_path(scalar(p.node, &p.path, p.line)?).map_err(|m| err(&p.path, p.line, m))?;
        let mut prefix = PrefixConfig {
            path: prefix_path,
            mode: None,
            page_size_bytes: None,
            fsync_relaxed: false,
        };
        if let Some(f) = t.take("fsync") {
            prefix.fsync_relaxed = match scalar(f.node, &f.path, f.line)?.trim() {
                "durable" => false,
                "relaxed" => true,
                other => {
                    return Err(err(
                        &f.path,
                        f.line,
                        format!("expected `durable` or `relaxed`, found {other:?}"),
                    ))
                }
            };
        }
        if let Some(m) = t.take("mode") {
            prefix.mode = Some(
                scalar(m.node, &m.path, m.line)?
                    .parse()
                    .map_err(|s: String| err(&m.path, m.line, s))?,
            );
        }
        if let Some(ps) = t.take("page_size") {
            prefix.page_size_bytes = Some(
                parse_size(scalar(ps.node, &ps.path, ps.line)?)
                    .map_err(|s| err(&ps.path, ps.line, s))?,
            );
        }
        t.finish(&["path", "mode", "page_size"])?;
        out.push(prefix);
    }
    Ok(out)
}

fn read_quotas(e: &Entry<'_>) -> Result<Vec<QuotaConfig>, ConfigError> {
    let Value::Seq(items) = &e.node.value else {
        return Err(err(
            &e.path,
            e.line,
            format!("expected a list of quotas, found {}", e.node.describe()),
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("{}[{i}]", e.path);
        let mut t = Table::new(Some(item), &path, item.line)?;
        let target = match (t.take("bucket"), t.take("prefix")) {
            (Some(b), None) => {
                QuotaTarget::Bucket(scalar(b.node, &b.path, b.line)?.trim().to_string())
            }
            (None, Some(p)) => QuotaTarget::Prefix(
                parse_path(scalar(p.node, &p.path, p.line)?)
                    .map_err(|m| err(&p.path, p.line, m))?,
            ),
            (Some(_), Some(p)) => {
                return Err(err(&p.path, p.line, "give `bucket` or `prefix`, not both"))
            }
            (None, None) => {
                return Err(err(
                    &path,
                    item.line,
                    "missing key `bucket` (a native bucket) or `prefix` (a path)",
                ))
            }
        };
        let l = t
            .take("limit")
            .ok_or_else(|| err(&path, item.line, "missing key `limit` (e.g. 10GiB)"))?;
        let limit_bytes =
            parse_size(scalar(l.node, &l.path, l.line)?).map_err(|m| err(&l.path, l.line, m))?;
        t.finish(&["bucket", "prefix", "limit"])?;
        out.push(QuotaConfig {
            target,
            limit_bytes,
        });
    }
    Ok(out)
}

fn read_devices(e: &Entry<'_>) -> Result<Vec<DeviceConfig>, ConfigError> {
    let Value::Seq(items) = &e.node.value else {
        return Err(err(
            &e.path,
            e.line,
            format!("expected a list of devices, found {}", e.node.describe()),
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("{}[{i}]", e.path);
        let mut t = Table::new(Some(item), &path, item.line)?;
        let n = t
            .take("name")
            .ok_or_else(|| err(&path, item.line, "missing key `name`"))?;
        let name = scalar(n.node, &n.path, n.line)?.trim().to_string();
        let k = t
            .take("kind")
            .ok_or_else(|| err(&path, item.line, "missing key `kind` (expected ram or dir)"))?;
        let kind: DeviceKind = scalar(k.node, &k.path, k.line)?
            .parse()
            .map_err(|s: String| err(&k.path, k.line, s))?;
        let mut dev = DeviceConfig::new(name, kind, None, 0);
        let mut capacity_given = false;
        for field in DEVICE_FIELDS {
            if let Some(f) = t.take(field) {
                let text = scalar(f.node, &f.path, f.line)?;
                set_device_field(&mut dev, field, text).map_err(|m| err(&f.path, f.line, m))?;
                capacity_given |= *field == "capacity";
            }
        }
        if !capacity_given {
            dev.capacity_bytes = match (kind, &dev.path) {
                (DeviceKind::Ram, _) => machine_ram_capacity(),
                (DeviceKind::Dir, Some(p)) => dir_capacity_for(p),
                // Missing path: validation reports it; any non-zero value will do.
                (DeviceKind::Dir, None) => 1 << 30,
            };
        }
        let mut known = vec!["name", "kind"];
        known.extend_from_slice(DEVICE_FIELDS);
        t.finish(&known)?;
        out.push(dev);
    }
    Ok(out)
}

/// Build a `Config` (not yet validated) from the document root.
pub(crate) fn from_tree(root: Option<&Node>) -> Result<Config, ConfigError> {
    let mut top = Table::new(root, "", root.map_or(1, |r| r.line))?;
    let mut cfg = Config::with_devices(Vec::new());
    for section in SECTIONS
        .iter()
        .copied()
        .filter(|s| *s != "devices" && *s != "quotas")
    {
        let Some(sec) = top.take(section) else {
            continue;
        };
        let mut t = Table::new(Some(sec.node), &sec.path, sec.line)?;
        let prefix = format!("{section}.");
        let mut known: Vec<&str> = Vec::new();
        for key in SCALAR_KEYS.iter().filter(|k| k.starts_with(&prefix)) {
            let short = &key[prefix.len()..];
            known.push(short);
            if *key == "cluster.hosts" {
                if let Some(e) = t.take(short) {
                    cfg.cluster.hosts = hosts_list(&e)?;
                }
                continue;
            }
            if let Some(e) = t.take(short) {
                let text = scalar(e.node, &e.path, e.line)?;
                set_scalar(&mut cfg, key, text).map_err(|m| err(&e.path, e.line, m))?;
            }
        }
        if section == "adapter" {
            known.extend(["include", "exclude", "prefixes"]);
            if let Some(e) = t.take("include") {
                cfg.adapter.include = paths_list(&e)?;
            }
            if let Some(e) = t.take("exclude") {
                cfg.adapter.exclude = paths_list(&e)?;
            }
            if let Some(e) = t.take("prefixes") {
                cfg.adapter.prefixes = read_prefixes(&e)?;
            }
        }
        t.finish(&known)?;
    }
    if let Some(e) = top.take("quotas") {
        cfg.quotas = read_quotas(&e)?;
    }
    cfg.devices = match top.take("devices") {
        Some(e) => read_devices(&e)?,
        None => machine_devices(),
    };
    top.finish(SECTIONS)?;
    Ok(cfg)
}
