//! Every rule of the schema, in one place. Errors name the dotted YAML key.

use crate::*;

type R = Result<(), ConfigError>;

fn fail(key: impl Into<String>, msg: impl Into<String>) -> R {
    Err(ConfigError::new(key, msg))
}

fn range_u64(key: &str, v: u64, min: u64, max: u64, show: fn(u64) -> String) -> R {
    if v < min || v > max {
        return fail(
            key,
            format!(
                "{} is out of range ({}..={})",
                show(v),
                show(min),
                show(max)
            ),
        );
    }
    Ok(())
}

fn int(v: u64) -> String {
    v.to_string()
}

fn size_in(key: &str, v: u64, min: u64, max: u64) -> R {
    range_u64(key, v, min, max, format_size)
}

fn power_of_two(key: &str, v: u64, show: fn(u64) -> String) -> R {
    if !v.is_power_of_two() {
        return fail(key, format!("{} is not a power of two", show(v)));
    }
    Ok(())
}

fn absolute(key: &str, p: &Path) -> R {
    if !p.is_absolute() {
        return fail(
            key,
            format!(
                "path {:?} must be absolute (or start with ~/)",
                p.display().to_string()
            ),
        );
    }
    Ok(())
}

fn finite_non_negative(key: &str, v: f64, what: &str) -> R {
    if !v.is_finite() || v < 0.0 {
        return fail(key, format!("{what} must be a finite non-negative value"));
    }
    Ok(())
}

/// Longest Unix socket path (`sun_path` is 108 bytes including the NUL).
pub(crate) const SOCKET_PATH_MAX: usize = 107;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const HOUR_MS: f64 = 3_600_000.0;
const DAY_MS: f64 = 86_400_000.0;

#[allow(clippy::manual_is_multiple_of)] // u64::is_multiple_of needs Rust 1.87
pub(crate) fn validate(c: &Config) -> R {
    // daemon
    let d = &c.daemon;
    if let Some(s) = &d.socket {
        absolute("daemon.socket", s)?;
        if s.as_os_str().len() > SOCKET_PATH_MAX {
            return fail(
                "daemon.socket",
                format!(
                    "socket path is {} bytes long (Unix sockets allow at most {SOCKET_PATH_MAX})",
                    s.as_os_str().len()
                ),
            );
        }
    }
    if let Some(p) = &d.shm_prefix {
        let ok_chars = p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if p.is_empty() || p.len() > 200 || !ok_chars || p.starts_with('.') {
            return fail(
                "daemon.shm_prefix",
                format!("invalid shared-memory prefix {p:?} (expected auto or 1 to 200 characters of [A-Za-z0-9._-], not starting with .)"),
            );
        }
    }
    size_in(
        "daemon.log_size_max",
        d.log_size_max_bytes,
        MIB,
        64 * 1024 * MIB,
    )?;
    range_u64("daemon.log_keep", d.log_keep.into(), 1, 100, int)?;
    range_u64("daemon.clients_max", d.clients_max.into(), 1, 4096, int)?;
    range_u64(
        "daemon.channels_per_client_max",
        d.channels_per_client_max.into(),
        1,
        1024,
        int,
    )?;
    power_of_two("daemon.ring_depth", d.ring_depth.into(), int)?;
    range_u64("daemon.ring_depth", d.ring_depth.into(), 2, 4096, int)?;
    if !(d.spin_us.is_finite() && (0.0..=10_000.0).contains(&d.spin_us)) {
        return fail(
            "daemon.spin",
            format!(
                "{} is out of range (0s..=10ms)",
                format_duration_us(d.spin_us)
            ),
        );
    }
    size_in("daemon.slot_arg_size", d.slot_arg_size_bytes, 4 * KIB, MIB)?;
    range_u64(
        "daemon.get_index",
        d.get_index_entries.into(),
        0,
        1 << 19,
        int,
    )?;
    range_u64(
        "daemon.stat_index",
        d.stat_index_entries.into(),
        0,
        1 << 19,
        int,
    )?;
    if d.slot_arg_size_bytes % (4 * KIB) != 0 {
        return fail(
            "daemon.slot_arg_size",
            format!(
                "{} is not a multiple of 4KiB",
                format_size(d.slot_arg_size_bytes)
            ),
        );
    }

    // devices
    if c.devices.is_empty() {
        return fail("devices", "at least one device is required");
    }
    if c.devices.len() > 64 {
        return fail(
            "devices",
            format!("{} devices configured (at most 64)", c.devices.len()),
        );
    }
    let mut ram_seen: Option<usize> = None;
    for (i, dev) in c.devices.iter().enumerate() {
        let key = |field: &str| format!("devices[{i}].{field}");
        let name_ok = !dev.name.is_empty()
            && dev.name.len() <= 32
            && dev
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return fail(
                key("name"),
                format!(
                    "invalid device name {:?} (expected 1 to 32 characters of [a-z0-9_-])",
                    dev.name
                ),
            );
        }
        if let Some(j) = c.devices[..i].iter().position(|o| o.name == dev.name) {
            return fail(
                key("name"),
                format!(
                    "duplicate device name {:?} (also used by devices[{j}])",
                    dev.name
                ),
            );
        }
        match (dev.kind, &dev.path) {
            (DeviceKind::Ram, Some(_)) => {
                return fail(
                    key("path"),
                    "a ram device has no path (it lives in shared memory)",
                );
            }
            (DeviceKind::Dir, None) => {
                return fail(
                    format!("devices[{i}]"),
                    format!("device {:?} of kind dir needs a `path`", dev.name),
                );
            }
            (DeviceKind::Dir, Some(p)) => {
                absolute(&key("path"), p)?;
                if let Some(j) = c.devices[..i]
                    .iter()
                    .position(|o| o.path.as_ref() == Some(p))
                {
                    return fail(
                        key("path"),
                        format!(
                            "directory {:?} is also used by devices[{j}]",
                            p.display().to_string()
                        ),
                    );
                }
            }
            (DeviceKind::Ram, None) => {}
        }
        if dev.kind == DeviceKind::Ram {
            if let Some(j) = ram_seen {
                return fail(
                    key("kind"),
                    format!("only one ram device is allowed (devices[{j}] is already ram)"),
                );
            }
            ram_seen = Some(i);
        }
        if dev.capacity_bytes == 0 {
            return fail(key("capacity"), "capacity must be greater than zero");
        }
        power_of_two(&key("block_size"), dev.block_size_bytes, format_size)?;
        size_in(&key("block_size"), dev.block_size_bytes, 64, MIB)?;
        if dev.capacity_bytes < dev.block_size_bytes {
            return fail(
                key("capacity"),
                format!(
                    "capacity {} is smaller than one block ({})",
                    format_size(dev.capacity_bytes),
                    format_size(dev.block_size_bytes)
                ),
            );
        }
        // A RAM tier lives in /dev/shm: it can never be larger than it.
        if dev.kind == DeviceKind::Ram {
            if let Ok(st) = rustix::fs::statvfs("/dev/shm") {
                let total = st.f_blocks.saturating_mul(st.f_frsize);
                if total > 0 && dev.capacity_bytes > total {
                    return fail(key("capacity"), format!("the ram device wants {} but /dev/shm holds only {}; lower the capacity", format_size(dev.capacity_bytes), format_size(total)));
                }
            }
        }
        if !(dev.bandwidth_mib_s.is_finite() && dev.bandwidth_mib_s > 0.0) {
            return fail(key("bandwidth"), "bandwidth must be greater than zero");
        }
        finite_non_negative(&key("latency"), dev.latency_us, "latency")?;
    }

    // placement
    let lease = c.placement.lease_size_bytes;
    size_in("placement.lease_size", lease, 64 * KIB, GIB)?;
    if lease % (4 * KIB) != 0 {
        return fail(
            "placement.lease_size",
            format!("{} is not a multiple of 4KiB", format_size(lease)),
        );
    }
    if let Some(ram) = c.ram_device() {
        if lease > ram.capacity_bytes {
            return fail(
                "placement.lease_size",
                format!(
                    "lease size {} exceeds the ram device capacity {}",
                    format_size(lease),
                    format_size(ram.capacity_bytes)
                ),
            );
        }
    }

    // metadata
    let m = &c.metadata;
    range_u64(
        "metadata.buckets_max",
        m.buckets_max.into(),
        1,
        1 << 24,
        int,
    )?;
    range_u64(
        "metadata.blobs_max",
        m.blobs_max.into(),
        1,
        u32::MAX.into(),
        int,
    )?;
    range_u64(
        "metadata.bucket_name_max",
        m.bucket_name_max.into(),
        1,
        65536,
        int,
    )?;
    range_u64(
        "metadata.blob_name_max",
        m.blob_name_max.into(),
        1,
        65536,
        int,
    )?;
    range_u64(
        "metadata.extents_per_blob_max",
        m.extents_per_blob_max.into(),
        1,
        65536,
        int,
    )?;
    size_in(
        "metadata.blob_size_max",
        m.blob_size_max_bytes,
        1 << 20,
        1 << 50,
    )?;
    range_u64(
        "metadata.tags_per_bucket_max",
        m.tags_per_bucket_max.into(),
        0,
        4096,
        int,
    )?;

    // adapter
    let a = &c.adapter;
    power_of_two("adapter.page_size", a.page_size_bytes, format_size)?;
    size_in(
        "adapter.page_size",
        a.page_size_bytes,
        strata_proto::types::PAGE_BYTES_MIN,
        strata_proto::types::PAGE_BYTES_MAX,
    )?;
    for (i, p) in a.include.iter().enumerate() {
        absolute(&format!("adapter.include[{i}]"), p)?;
    }
    for (i, p) in a.exclude.iter().enumerate() {
        absolute(&format!("adapter.exclude[{i}]"), p)?;
    }
    for (i, q) in c.quotas.iter().enumerate() {
        if q.limit_bytes == 0 {
            return fail(
                format!("quotas[{i}].limit"),
                "a quota of 0 bytes refuses everything; remove the quota or give a size",
            );
        }
        match &q.target {
            QuotaTarget::Prefix(p) => absolute(&format!("quotas[{i}].prefix"), p)?,
            QuotaTarget::Bucket(b) if b.is_empty() => {
                return fail(format!("quotas[{i}].bucket"), "an empty bucket name")
            }
            QuotaTarget::Bucket(_) => {}
        }
        if let Some(j) = c.quotas[..i].iter().position(|o| o.target == q.target) {
            return fail(
                format!("quotas[{i}]"),
                format!("the same bucket or prefix as quotas[{j}]"),
            );
        }
    }
    for (i, p) in a.prefixes.iter().enumerate() {
        absolute(&format!("adapter.prefixes[{i}].path"), &p.path)?;
        if let Some(j) = a.prefixes[..i].iter().position(|o| o.path == p.path) {
            return fail(
                format!("adapter.prefixes[{i}].path"),
                format!(
                    "prefix {:?} is also listed in adapter.prefixes[{j}]",
                    p.path.display().to_string()
                ),
            );
        }
        if let Some(ps) = p.page_size_bytes {
            let key = format!("adapter.prefixes[{i}].page_size");
            power_of_two(&key, ps, format_size)?;
            size_in(
                &key,
                ps,
                strata_proto::types::PAGE_BYTES_MIN,
                strata_proto::types::PAGE_BYTES_MAX,
            )?;
        }
    }

    // flush
    let f = &c.flush;
    if !(f.interval_ms.is_finite() && f.interval_ms > 0.0 && f.interval_ms <= HOUR_MS) {
        return fail(
            "flush.interval",
            format!(
                "{} is out of range (greater than 0, at most 1h)",
                format_duration_us(f.interval_ms * 1e3)
            ),
        );
    }
    range_u64("flush.threads", f.threads.into(), 1, 64, int)?;
    finite_non_negative(
        "flush.bandwidth_max",
        f.bandwidth_max_mib_s,
        "bandwidth_max",
    )?;
    if !(f.stop_give_up_ms.is_finite()
        && f.stop_give_up_ms > 0.0
        && f.stop_give_up_ms <= 24.0 * HOUR_MS)
    {
        return fail(
            "flush.stop_give_up",
            format!(
                "{} is out of range (greater than 0, at most 24h)",
                format_duration_us(f.stop_give_up_ms * 1e3)
            ),
        );
    }
    if !(f.stall_warn_ms.is_finite() && f.stall_warn_ms > 0.0 && f.stall_warn_ms <= HOUR_MS) {
        return fail(
            "flush.stall_warn",
            format!(
                "{} is out of range (greater than 0, at most 1h)",
                format_duration_us(f.stall_warn_ms * 1e3)
            ),
        );
    }
    if !(f.busy_window_ms.is_finite() && (0.0..=60_000.0).contains(&f.busy_window_ms)) {
        return fail(
            "flush.busy_window",
            format!(
                "{} is out of range (0 = never yield, at most 1m)",
                format_duration_us(f.busy_window_ms * 1e3)
            ),
        );
    }
    range_u64("flush.busy_jobs", f.busy_jobs.into(), 1, 64, int)?;
    finite_non_negative(
        "flush.busy_bandwidth_max",
        f.busy_bandwidth_max_mib_s,
        "busy_bandwidth_max",
    )?;
    range_u64("flush.nice", f.nice.into(), 0, 19, int)?;

    // organizer
    let o = &c.organizer;
    if !(o.interval_ms.is_finite() && o.interval_ms > 0.0 && o.interval_ms <= HOUR_MS) {
        return fail(
            "organizer.interval",
            format!(
                "{} is out of range (greater than 0, at most 1h)",
                format_duration_us(o.interval_ms * 1e3)
            ),
        );
    }
    finite_non_negative(
        "organizer.bandwidth_max",
        o.bandwidth_max_mib_s,
        "bandwidth_max",
    )?;
    for (key, v) in [
        ("organizer.promote_threshold", o.promote_threshold),
        ("organizer.demote_threshold", o.demote_threshold),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return fail(key, format!("{v} is out of range (0..=1)"));
        }
    }
    for (key, v) in [
        ("organizer.recency_window", o.recency_window_ms),
        ("organizer.frequency_window", o.frequency_window_ms),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= DAY_MS) {
            return fail(
                key,
                format!(
                    "{} is out of range (greater than 0, at most 24h)",
                    format_duration_us(v * 1e3)
                ),
            );
        }
    }
    if !(o.high_water > 0.0 && o.high_water <= 1.0) {
        return fail(
            "organizer.high_water",
            format!(
                "{} is out of range (greater than 0, at most 1)",
                o.high_water
            ),
        );
    }
    if !(0.0..1.0).contains(&o.low_water) {
        return fail(
            "organizer.low_water",
            format!("{} is out of range (0 to less than 1)", o.low_water),
        );
    }
    if o.low_water >= o.high_water {
        return fail(
            "organizer.low_water",
            format!(
                "low_water ({}) must be less than high_water ({})",
                o.low_water, o.high_water
            ),
        );
    }
    // journal
    let j = &c.journal;
    if !(j.sync_interval_ms.is_finite()
        && j.sync_interval_ms > 0.0
        && j.sync_interval_ms <= 60_000.0)
    {
        return fail(
            "journal.sync_interval",
            format!(
                "{} is out of range (greater than 0, at most 1m)",
                format_duration_us(j.sync_interval_ms * 1e3)
            ),
        );
    }
    range_u64(
        "journal.compact_min",
        j.compact_min_bytes,
        1 << 20,
        1 << 40,
        int,
    )?;
    range_u64("journal.inline_max", j.inline_max_bytes, 0, 1 << 40, int)?;
    if j.enabled == Some(true) && c.devices.iter().all(|d| d.volatile) {
        return fail(
            "journal.enabled",
            "the journal needs a non-volatile device (a `dir` device with `volatile: false`)"
                .to_string(),
        );
    }
    // trace
    let t = &c.trace;
    if let Some(p) = &t.path {
        absolute("trace.path", p)?;
    }
    size_in("trace.size_max", t.size_max_bytes, MIB, 64 * GIB)?;
    // prefetch
    let p = &c.prefetch;
    range_u64(
        "prefetch.readahead_pages",
        p.readahead_pages.into(),
        0,
        1024,
        int,
    )?;
    range_u64("prefetch.threads", p.threads.into(), 1, 16, int)?;
    range_u64(
        "prefetch.successors_max",
        p.successors_max.into(),
        1,
        16,
        int,
    )?;
    range_u64("prefetch.min_count", p.min_count.into(), 1, 1_000_000, int)?;
    // cluster
    let k = &c.cluster;
    for (i, h) in k.hosts.iter().enumerate() {
        if let Err(e) = strata_cluster::hostlist::expand(h) {
            return fail(
                format!("cluster.hosts[{i}]"),
                format!("bad hostlist {h:?}: {e}"),
            );
        }
    }
    if k.port == 0 {
        return fail("cluster.port", "port 0 is not a port (expected 1..=65535)");
    }
    if let Some(p) = &k.secret_file {
        absolute("cluster.secret_file", p)?;
    }
    for (key, p) in [
        ("cluster.tls_cert", &k.tls_cert),
        ("cluster.tls_key", &k.tls_key),
        ("cluster.tls_ca", &k.tls_ca),
    ] {
        if let Some(p) = p {
            absolute(key, p)?;
        }
    }
    let ms = |key: &str, v: f64, min: f64, max: f64, range: &str| -> R {
        if !(v.is_finite() && v >= min && v <= max) {
            return fail(
                key,
                format!("{} is out of range ({range})", format_duration_us(v * 1e3)),
            );
        }
        Ok(())
    };
    ms(
        "cluster.call_timeout",
        k.call_timeout_ms,
        1.0,
        3_600_000.0,
        "1ms to 1h",
    )?;
    ms(
        "cluster.heartbeat_interval",
        k.heartbeat_interval_ms,
        1.0,
        60_000.0,
        "1ms to 1m",
    )?;
    ms(
        "cluster.start_timeout",
        k.start_timeout_ms,
        1.0,
        3_600_000.0,
        "1ms to 1h",
    )?;
    ms(
        "cluster.shadow_sweep_interval",
        k.shadow_sweep_interval_ms,
        100.0,
        86_400_000.0,
        "100ms to 1d",
    )?;
    if k.remote_tier_bytes > 0 {
        size_in("cluster.remote_tier", k.remote_tier_bytes, 1 << 20, 1 << 40)?;
    }
    if k.heartbeat_interval_ms >= k.call_timeout_ms {
        return fail(
            "cluster.heartbeat_interval",
            format!(
                "heartbeat_interval ({}) must be shorter than call_timeout ({}): a live node would look dead",
                format_duration_us(k.heartbeat_interval_ms * 1e3),
                format_duration_us(k.call_timeout_ms * 1e3)
            ),
        );
    }
    if o.demote_threshold >= o.promote_threshold {
        return fail(
            "organizer.demote_threshold",
            format!(
                "demote_threshold ({}) must be less than promote_threshold ({})",
                o.demote_threshold, o.promote_threshold
            ),
        );
    }
    Ok(())
}
