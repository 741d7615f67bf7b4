//! `strata trace`: the daemon's I/O log (`trace:` in the configuration) as a
//! table or JSON lines, filtered by bucket and op, optionally followed; and
//! the prefetch/trace lines of `strata status`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use strata_config::Config;
use strata_proto::control::{StatusReply, TraceRecord};

use crate::table::format_size;

/// How often `--follow` looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// Bytes read per look while following.
const FOLLOW_CHUNK_BYTES: u64 = 16 << 20;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// JSON lines (one record per line) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keep printing new records (until interrupted).
    #[arg(long, short)]
    pub follow: bool,
    /// Only records of this bucket, or of buckets (file paths) under it when it ends with `/`.
    #[arg(long, value_name = "BUCKET")]
    pub bucket: Option<String>,
    /// Only these ops (repeatable or comma-separated): put, get, delete,
    /// rename, open, read, write, fill, truncate, unlink, sync, readahead,
    /// promote, dropped.
    #[arg(long, value_name = "OP", value_delimiter = ',')]
    pub op: Vec<String>,
    /// Only the last N matching records (before following).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Print the trace file's path and exit.
    #[arg(long)]
    pub path: bool,
}

const OPS: &[&str] = &[
    "put",
    "get",
    "delete",
    "rename",
    "open",
    "read",
    "write",
    "fill",
    "truncate",
    "unlink",
    "sync",
    "readahead",
    "promote",
    "dropped",
];

impl TraceArgs {
    fn matches(&self, r: &TraceRecord) -> bool {
        if !self.op.is_empty() && !self.op.iter().any(|o| o.eq_ignore_ascii_case(&r.op)) {
            return false;
        }
        match &self.bucket {
            None => true,
            Some(b) if b.ends_with('/') => r.bucket.starts_with(b.as_str()),
            Some(b) => r.bucket == *b,
        }
    }
}

/// The trace file: the running daemon's, else the configured one.
fn trace_path(cfg: &Config) -> Result<PathBuf> {
    let socket = cfg.resolved_socket_path();
    match strata_client::status(&socket) {
        Ok(st) => match st.trace {
            Some(t) => Ok(PathBuf::from(t.path)),
            None => bail!("the daemon at {} keeps no I/O log: set `trace: {{enabled: true}}` in the configuration (or STRATA_TRACE_ENABLED=1) and restart it", socket.display()),
        },
        Err(_) => {
            let p = cfg.resolved_trace_path();
            if !p.exists() && !rotated(&p).exists() {
                bail!("no daemon running and no trace file at {}: enable `trace.enabled` and start the daemon", p.display());
            }
            Ok(p)
        }
    }
}

fn rotated(p: &Path) -> PathBuf {
    strata_daemon::trace::rotated_path(p)
}

/// Parses trace lines; returns the records and how many lines were unreadable.
pub fn parse(text: &str) -> (Vec<TraceRecord>, usize) {
    let mut bad = 0;
    let mut out = Vec::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<TraceRecord>(l) {
            Ok(r) => out.push(r),
            Err(_) => bad += 1,
        }
    }
    (out, bad)
}

/// `HH:MM:SS.uuuuuu` (UTC) of a Unix time in ns.
fn clock(t_ns: u64) -> String {
    let s = t_ns / 1_000_000_000;
    let us = (t_ns % 1_000_000_000) / 1000;
    format!(
        "{:02}:{:02}:{:02}.{us:06}",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60
    )
}

pub const HEADER: &str =
    "TIME (UTC)          PID      OP         TIER    SIZE       OFFSET  BUCKET/BLOB";

/// One table row.
pub fn row(r: &TraceRecord) -> String {
    if r.op == "dropped" {
        return format!(
            "{}  {:>7}  {:<9}  {} records lost (the daemon's trace queue was full)",
            clock(r.t_ns),
            "-",
            r.op,
            r.size
        );
    }
    let name = if r.blob.is_empty() {
        r.bucket.clone()
    } else {
        format!("{}/{}", r.bucket, r.blob)
    };
    let tier = if r.tier.is_empty() {
        "-"
    } else {
        r.tier.as_str()
    };
    let mut s = format!(
        "{}  {:>7}  {:<9}  {:<6}  {:>9}  {:>11}  {}",
        clock(r.t_ns),
        r.pid,
        r.op,
        tier,
        format_size(r.size),
        r.off,
        name
    );
    if let Some(e) = &r.err {
        s.push_str(&format!("  [{e}]"));
    }
    s
}

fn emit(out: &mut impl Write, args: &TraceArgs, r: &TraceRecord) -> std::io::Result<()> {
    if args.json {
        writeln!(out, "{}", serde_json::to_string(r).unwrap_or_default())
    } else {
        writeln!(out, "{}", row(r))
    }
}

pub fn command(cfg: &Config, args: &TraceArgs) -> Result<ExitCode> {
    for o in &args.op {
        if !OPS.contains(&o.to_ascii_lowercase().as_str()) {
            bail!("unknown op {o:?} (expected one of: {})", OPS.join(", "));
        }
    }
    let path = trace_path(cfg)?;
    if args.path {
        println!("{}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let old = std::fs::read_to_string(rotated(&path)).unwrap_or_default();
    let (cur, mut pos) = match std::fs::File::open(&path) {
        Ok(mut f) => {
            let mut s = String::new();
            f.read_to_string(&mut s)?;
            let n = s.len() as u64;
            (s, n)
        }
        Err(_) => (String::new(), 0),
    };
    // Only whole lines: a partial last line is read again when following.
    let whole = cur.rfind('\n').map_or(0, |i| i + 1);
    pos = pos.min(whole as u64);
    let (mut recs, mut bad) = parse(&old);
    let (more, bad2) = parse(&cur[..whole]);
    recs.extend(more);
    bad += bad2;
    let mut matching: Vec<&TraceRecord> = recs.iter().filter(|r| args.matches(r)).collect();
    if let Some(n) = args.tail {
        matching.drain(..matching.len().saturating_sub(n));
    }
    let mut out = std::io::stdout().lock();
    if !args.json {
        writeln!(out, "{HEADER}")?;
    }
    for r in matching {
        emit(&mut out, args, r)?;
    }
    out.flush()?;
    if bad > 0 {
        eprintln!("strata trace: {bad} unreadable lines skipped");
    }
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut carry = String::new();
    let mut ino = std::fs::metadata(&path).map(|m| m.ino()).unwrap_or(0);
    // Runs until interrupted. On rotation the rest of the old file (now
    // `<path>.1`) is read before the new one, from its start.
    loop {
        std::thread::sleep(FOLLOW_POLL);
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.ino() != ino {
            let old = rotated(&path);
            if std::fs::metadata(&old).is_ok_and(|m| m.ino() == ino) {
                read_from(&old, &mut pos, &mut carry, &mut out, args)?;
            }
            ino = meta.ino();
            pos = 0;
            carry.clear();
        } else if meta.len() < pos {
            pos = 0;
            carry.clear();
        }
        read_from(&path, &mut pos, &mut carry, &mut out, args)?;
    }
}

/// Prints the whole records of `path` after `pos` (bounded per call) and advances `pos`.
fn read_from(
    path: &Path,
    pos: &mut u64,
    carry: &mut String,
    out: &mut impl Write,
    args: &TraceArgs,
) -> Result<()> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Ok(());
    };
    let len = f.metadata()?.len();
    if len <= *pos {
        return Ok(());
    }
    f.seek(SeekFrom::Start(*pos))?;
    let mut buf = Vec::new();
    f.take((len - *pos).min(FOLLOW_CHUNK_BYTES))
        .read_to_end(&mut buf)?;
    *pos += buf.len() as u64;
    carry.push_str(&String::from_utf8_lossy(&buf));
    let Some(end) = carry.rfind('\n') else {
        return Ok(());
    };
    let (recs, _) = parse(&carry[..end + 1]);
    carry.drain(..end + 1);
    for r in recs.iter().filter(|r| args.matches(r)) {
        emit(out, args, r)?;
    }
    out.flush()?;
    Ok(())
}

/// The prefetcher and I/O-log lines of `strata status`.
pub fn status_lines(st: &StatusReply) -> String {
    let p = &st.prefetch;
    let mut s = String::from("\n");
    if !p.enabled {
        s.push_str("prefetch off (prefetch.enabled: false)\n");
    } else {
        let ra = if p.readahead_pages > 0 {
            format!("read-ahead {} pages", p.readahead_pages)
        } else {
            "read-ahead off".into()
        };
        let pr = if p.predict {
            "prediction on"
        } else {
            "prediction off"
        };
        s.push_str(&format!(
            "prefetch {ra}, {pr}  streams {}  pages read ahead {} ({}, {} discarded)  promotions asked {}, done {} ({})  model {} blobs\n",
            p.streams,
            p.readahead_pages_total,
            format_size(p.readahead_bytes_total),
            p.readahead_discarded_total,
            p.promote_requests_total,
            p.promoted_blobs_total,
            format_size(p.promoted_bytes_total),
            p.model_blobs
        ));
        s.push_str(&format!(
            "prefetched {}  used {}  unused {}  pending {}\n",
            format_size(p.prefetched_bytes_total),
            format_size(p.used_bytes_total),
            format_size(p.unused_bytes_total),
            format_size(p.pending_bytes)
        ));
    }
    match &st.trace {
        Some(t) => s.push_str(&format!(
            "trace    {}  {} events  {} dropped  (cap {} with {}.1; `strata trace`)\n",
            t.path,
            t.events_total,
            t.dropped_total,
            format_size(t.size_max_bytes),
            t.path
        )),
        None => s.push_str("trace    off (trace.enabled: false)\n"),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(op: &str, bucket: &str, blob: &str) -> TraceRecord {
        TraceRecord {
            t_ns: 3_723_000_004_000,
            pid: 42,
            op: op.into(),
            bucket: bucket.into(),
            blob: blob.into(),
            off: 0,
            size: 4096,
            tier: "ram".into(),
            err: None,
        }
    }

    #[test]
    fn filters_by_op_and_bucket() {
        let a = TraceArgs {
            op: vec!["get".into()],
            ..Default::default()
        };
        assert!(a.matches(&rec("get", "b", "x")));
        assert!(!a.matches(&rec("put", "b", "x")));
        let b = TraceArgs {
            bucket: Some("/data/".into()),
            ..Default::default()
        };
        assert!(b.matches(&rec("read", "/data/f", "")));
        assert!(!b.matches(&rec("read", "/database", "")));
        let c = TraceArgs {
            bucket: Some("b".into()),
            ..Default::default()
        };
        assert!(c.matches(&rec("get", "b", "x")) && !c.matches(&rec("get", "bb", "x")));
    }

    #[test]
    fn rows_are_readable() {
        let r = row(&rec("get", "b", "x"));
        assert!(r.starts_with("01:02:03.000004"), "{r}");
        assert!(
            r.contains(" get ") && r.contains("ram") && r.contains("4.0KiB") && r.ends_with("b/x"),
            "{r}"
        );
        let d = row(&TraceRecord {
            op: "dropped".into(),
            size: 7,
            ..Default::default()
        });
        assert!(d.contains("7 records lost"), "{d}");
        let (recs, bad) =
            parse("{\"t_ns\":1,\"pid\":2,\"op\":\"put\",\"bucket\":\"b\"}\nnot json\n\n");
        assert_eq!((recs.len(), bad), (1, 1));
    }
}
