//! The I/O log (`trace:` in the configuration, `strata trace`).
//!
//! The poller records one [`Event`] per traced request (time, client pid,
//! bucket, blob, op, offset, size, tier) with [`Tracer::record`]: a
//! `try_send` on a bounded queue (`TRACE_QUEUE_MAX`). A full queue drops the
//! event and counts it — the poller never waits for the disk. One writer
//! thread turns events into JSON lines ([`TraceRecord`]) and appends them in
//! batches; when the file would pass half of `trace.size_max` it is renamed
//! to `<path>.1` (replacing the previous one) and a new file is started, so
//! the two files together stay below `size_max`. Lost events appear in the
//! file as a `dropped` record carrying their count.
//!
//! The same events feed the prefetcher in memory (`crate::prefetch`), whether
//! or not the file is written: `observe` is its side of the engine's hook (`Engine::serve`).
//!
//! **Architecture Invariant:** recording never blocks and never allocates
//! more than one event's names; the writer is the only thread touching the
//! trace files.
//!
//! ## Details
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `trace.rs` is the **I/O log** (`trace:` config, `strata trace`). The engine's one hook,
//! in `Engine::serve` (`events::wanted` before a request runs — to copy its name out of the
//! transport's buffer before the reply overwrites it — and `trace::observe` after) turns put/get/delete/rename and the file
//! ops open/read/write/fill/truncate/unlink/sync into `Event`s (time, client pid, bucket, blob,
//! offset, size, tier that served or took the bytes — `dest` for read-through —, error name)
//! and `try_send`s them on a bounded queue (`TRACE_QUEUE_MAX`, 65 536): a full queue drops the
//! event and counts it (`status`, and a `dropped` record in the file), the poller never waits.
//! One writer thread appends JSON lines (`TraceRecord` in `strata-proto`) in batches
//! (≤ 256 KiB); before the file would pass half of `trace.size_max` it is renamed to
//! `<path>.1` and restarted, so both files together stay under the cap. The daemon's own
//! operations appear with pid 0 (`readahead`, `promote`). The same hook feeds the prefetcher
//! in memory whether or not the file is written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use strata_meta::BucketId;
use strata_proto::control::{TraceRecord, TraceStatus};

use strata_proto::types::{TIER_DEST, TIER_HOLE, TIER_PENDING};

use crate::core::{now_ns, Core};
use crate::events::{Seen, SeenOp};

/// Events waiting for the writer; beyond this they are dropped and counted.
pub const TRACE_QUEUE_MAX: usize = 65_536;
/// Bytes the writer appends per `write` call at most.
const TRACE_BATCH_BYTES: usize = 256 << 10;

/// One traced operation, as the poller sees it.
#[derive(Debug, Clone)]
pub struct Event {
    pub t_ns: u64,
    pub pid: u32,
    pub op: &'static str,
    pub bucket: String,
    pub blob: String,
    pub off: u64,
    pub size: u64,
    /// Tier index, `TIER_DEST`, or None.
    pub tier: Option<u32>,
    pub err: Option<&'static str>,
}

/// The poller's handle on the I/O log.
pub struct Tracer {
    tx: Option<SyncSender<Event>>,
    /// Drops not yet noted in the file (the writer takes them).
    dropped: Arc<AtomicU64>,
    dropped_total: u64,
    events_total: u64,
    path: PathBuf,
    size_max_bytes: u64,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer::off()
    }
}

impl Tracer {
    /// A tracer that records nothing.
    pub fn off() -> Tracer {
        Tracer {
            tx: None,
            dropped: Arc::new(AtomicU64::new(0)),
            dropped_total: 0,
            events_total: 0,
            path: PathBuf::new(),
            size_max_bytes: 0,
            writer: None,
        }
    }

    /// Opens (appends to) the trace file and starts the writer thread.
    /// `tiers`: tier names by index, for the `tier` column.
    pub fn start(path: &Path, size_max_bytes: u64, tiers: Vec<String>) -> std::io::Result<Tracer> {
        Tracer::start_with_queue(path, size_max_bytes, tiers, TRACE_QUEUE_MAX)
    }

    fn start_with_queue(
        path: &Path,
        size_max_bytes: u64,
        tiers: Vec<String>,
        queue: usize,
    ) -> std::io::Result<Tracer> {
        assert!(
            size_max_bytes >= 2 * TRACE_BATCH_BYTES as u64,
            "trace.size_max below the writer's batch"
        );
        let file = open_append(path)?;
        let (tx, rx) = mpsc::sync_channel(queue);
        let dropped = Arc::new(AtomicU64::new(0));
        let w = Writer {
            path: path.to_path_buf(),
            size: file.metadata()?.len(),
            file,
            half_bytes: size_max_bytes / 2,
            tiers,
            dropped: dropped.clone(),
            failed: false,
        };
        let writer = std::thread::Builder::new()
            .name("strata-trace".into())
            .spawn(move || w.run(rx))?;
        Ok(Tracer {
            tx: Some(tx),
            dropped,
            dropped_total: 0,
            events_total: 0,
            path: path.to_path_buf(),
            size_max_bytes,
            writer: Some(writer),
        })
    }

    /// Whether events are written to the trace file.
    pub fn on(&self) -> bool {
        self.tx.is_some()
    }

    /// Queues `e` for the writer; never blocks (a full queue drops it).
    pub fn record(&mut self, e: Event) {
        let Some(tx) = &self.tx else { return };
        self.events_total += 1;
        match tx.try_send(e) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped_total += 1;
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn status(&self) -> Option<TraceStatus> {
        self.tx.as_ref()?;
        Some(TraceStatus {
            path: self.path.display().to_string(),
            size_max_bytes: self.size_max_bytes,
            events_total: self.events_total,
            dropped_total: self.dropped_total,
        })
    }

    /// Writes what is queued and stops the writer (shutdown).
    pub fn stop(&mut self) {
        self.tx = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The file a trace is appended to (created 0600).
fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The rotated predecessor of a trace file: `<path>.1`.
pub fn rotated_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".1");
    PathBuf::from(s)
}

struct Writer {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    /// Rotate when the file would pass this.
    half_bytes: u64,
    tiers: Vec<String>,
    dropped: Arc<AtomicU64>,
    failed: bool,
}

impl Writer {
    fn tier_name(&self, t: Option<u32>) -> String {
        match t {
            None | Some(TIER_HOLE) => String::new(),
            Some(TIER_DEST) => "dest".into(),
            Some(TIER_PENDING) => "pending".into(),
            Some(i) => self
                .tiers
                .get(i as usize)
                .cloned()
                .unwrap_or_else(|| i.to_string()),
        }
    }

    fn line(&self, e: Event) -> String {
        let r = TraceRecord {
            t_ns: e.t_ns,
            pid: e.pid,
            op: e.op.into(),
            tier: self.tier_name(e.tier),
            bucket: e.bucket,
            blob: e.blob,
            off: e.off,
            size: e.size,
            err: e.err.map(str::to_string),
        };
        let mut s = serde_json::to_string(&r).unwrap_or_default();
        s.push('\n');
        s
    }

    fn dropped_line(&self, n: u64) -> String {
        let r = TraceRecord {
            t_ns: now_ns(),
            op: "dropped".into(),
            size: n,
            ..TraceRecord::default()
        };
        let mut s = serde_json::to_string(&r).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Appends `buf`, rotating first if the file would pass half the cap.
    fn put(&mut self, buf: &str) {
        if self.size > 0 && self.size + buf.len() as u64 > self.half_bytes {
            let rotated = rotated_path(&self.path);
            let res = std::fs::rename(&self.path, &rotated).and_then(|()| open_append(&self.path));
            match res {
                Ok(f) => {
                    self.file = f;
                    self.size = 0;
                }
                Err(e) => {
                    if !self.failed {
                        tracing::warn!(path = %self.path.display(), "cannot rotate the trace file: {e}");
                        self.failed = true;
                    }
                    return;
                }
            }
        }
        match self.file.write_all(buf.as_bytes()) {
            Ok(()) => self.size += buf.len() as u64,
            Err(e) => {
                if !self.failed {
                    tracing::warn!(path = %self.path.display(), "cannot write the trace file: {e}");
                    self.failed = true;
                }
            }
        }
    }

    fn run(mut self, rx: Receiver<Event>) {
        // Bounded by the queue: each round takes what is queued, writes it,
        // and sleeps in `recv` until more arrives or the tracer is gone.
        while let Ok(first) = rx.recv() {
            let mut buf = String::with_capacity(TRACE_BATCH_BYTES);
            let mut next = Some(first);
            while let Some(e) = next {
                let lost = self.dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    buf.push_str(&self.dropped_line(lost));
                }
                let l = self.line(e);
                if buf.len() + l.len() > TRACE_BATCH_BYTES && !buf.is_empty() {
                    self.put(&buf);
                    buf.clear();
                }
                buf.push_str(&l);
                next = rx.try_recv().ok();
            }
            if !buf.is_empty() {
                self.put(&buf);
            }
        }
        let lost = self.dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            let l = self.dropped_line(lost);
            self.put(&l);
        }
        let _ = self.file.flush();
    }
}

// ---------------------------------------------------------------------------
// The I/O log's side of the engine's observation hook (Engine::serve, crate::events)

/// After a request of process `pid` ran: records it in the I/O log.
pub(crate) fn observe(core: &Core, tr: &mut Tracer, pid: u32, s: &Seen) {
    let bucket = s.bucket;
    if !tr.on() {
        return;
    }
    let err = s.err.map(|e| e.name());
    let blob_tier = |core: &Core, name: &str| {
        let id = core.meta.blob_lookup(bucket, name).ok()?;
        core.meta
            .blob(id)?
            .extents
            .iter()
            .find(|e| !e.is_hole())
            .map(|e| e.tier)
    };
    let page_tier = |core: &Core, off: u64| {
        let rec = core.meta.file(bucket).ok()?;
        let bid = core.meta.page_blob(bucket, off / rec.page_bytes.max(1))?;
        core.meta
            .blob(bid)?
            .extents
            .iter()
            .find(|e| !e.is_hole())
            .map(|e| e.tier)
    };
    let ok = s.err.is_none();
    let name = s.name.clone();
    let (opname, blob, tier, size, off, path) = match s.op {
        SeenOp::Put => (
            "put",
            name.clone(),
            if ok { blob_tier(core, &name) } else { None },
            s.len,
            s.offset,
            None,
        ),
        SeenOp::Get => (
            "get",
            name,
            if ok { s.tier } else { None },
            s.len.min(s.size),
            s.offset,
            None,
        ),
        SeenOp::Delete => ("delete", name, None, 0, 0, None),
        SeenOp::Rename => ("rename", name, None, 0, 0, None),
        SeenOp::Open => ("open", String::new(), None, 0, 0, Some(name)),
        SeenOp::Unlink => ("unlink", String::new(), None, 0, 0, Some(name)),
        SeenOp::Read => (
            "read",
            String::new(),
            if ok { s.tier } else { None },
            if ok { s.covered } else { s.len },
            s.offset,
            None,
        ),
        SeenOp::Write => {
            let at = s.written_at.unwrap_or(s.offset);
            (
                "write",
                String::new(),
                if ok { page_tier(core, at) } else { None },
                s.len,
                at,
                None,
            )
        }
        SeenOp::Fill => (
            "fill",
            String::new(),
            if ok { page_tier(core, s.offset) } else { None },
            s.len,
            s.offset,
            None,
        ),
        SeenOp::Truncate => ("truncate", String::new(), None, s.len, 0, None),
        SeenOp::Sync => ("sync", String::new(), None, 0, 0, None),
        SeenOp::Other => return,
    };
    let bucket_name = match path {
        Some(p) => p,
        None => core
            .meta
            .bucket(bucket)
            .map(|b| b.name.to_string())
            .unwrap_or_default(),
    };
    let e = Event {
        t_ns: now_ns(),
        pid,
        op: opname,
        bucket: bucket_name,
        blob,
        off,
        size,
        tier,
        err,
    };
    tr.record(e);
}

/// Records an operation of the daemon itself (read-ahead, promotion).
#[allow(clippy::too_many_arguments)]
pub fn record_internal(
    core: &Core,
    tr: &mut Tracer,
    op: &'static str,
    bucket: BucketId,
    blob: &str,
    off: u64,
    size: u64,
    tier: Option<u32>,
) {
    if !tr.on() {
        return;
    }
    let bucket = core
        .meta
        .bucket(bucket)
        .map(|b| b.name.to_string())
        .unwrap_or_default();
    tr.record(Event {
        t_ns: now_ns(),
        pid: 0,
        op,
        bucket,
        blob: blob.to_string(),
        off,
        size,
        tier,
        err: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: u64) -> Event {
        Event {
            t_ns: i,
            pid: 7,
            op: "get",
            bucket: "b".into(),
            blob: format!("k{i}"),
            off: 0,
            size: 4096,
            tier: Some(0),
            err: None,
        }
    }

    fn records(path: &Path) -> Vec<TraceRecord> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn writes_json_lines_with_tier_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let mut t = Tracer::start(&path, 1 << 20, vec!["ram".into(), "disk".into()]).unwrap();
        t.record(ev(1));
        t.record(Event {
            tier: Some(TIER_DEST),
            op: "read",
            ..ev(2)
        });
        t.record(Event {
            tier: Some(TIER_PENDING),
            op: "read",
            ..ev(4)
        });
        t.record(Event {
            tier: Some(1),
            err: Some("NoBlob"),
            ..ev(3)
        });
        t.stop();
        let r = records(&path);
        assert_eq!(r.len(), 4);
        assert_eq!(r[2].tier, "pending");
        assert_eq!(
            (
                r[0].op.as_str(),
                r[0].tier.as_str(),
                r[0].blob.as_str(),
                r[0].pid
            ),
            ("get", "ram", "k1", 7)
        );
        assert_eq!(r[1].tier, "dest");
        assert_eq!(
            (r[3].tier.as_str(), r[3].err.as_deref()),
            ("disk", Some("NoBlob"))
        );
        assert_eq!(
            t.status().map(|s| s.events_total),
            None,
            "a stopped tracer is off"
        );
    }

    #[test]
    fn rotation_keeps_both_files_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let cap = 2 * TRACE_BATCH_BYTES as u64;
        let mut t = Tracer::start(&path, cap, vec!["ram".into()]).unwrap();
        // ~100 B per line: 20 000 lines are ~2 MB, several rotations.
        for i in 0..20_000 {
            t.record(ev(i));
            if i % 1000 == 0 {
                std::thread::yield_now();
            }
        }
        let st = t.status().unwrap();
        t.stop();
        let a = std::fs::metadata(&path).unwrap().len();
        let b = std::fs::metadata(rotated_path(&path)).unwrap().len();
        assert!(a + b <= cap, "{a} + {b} > {cap}");
        // Everything is either in the files (tail), rotated away, or counted as dropped.
        let last = records(&path);
        assert!(!last.is_empty());
        assert!(st.events_total == 20_000);
        let lost: u64 = last
            .iter()
            .chain(records(&rotated_path(&path)).iter())
            .filter(|r| r.op == "dropped")
            .map(|r| r.size)
            .sum();
        assert!(lost <= st.dropped_total);
    }

    #[test]
    fn full_queue_drops_and_counts_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        // A cap the run cannot reach (no rotation: every line stays in one file).
        let mut t = Tracer::start_with_queue(&path, 64 << 20, vec![], 1).unwrap();
        // Far more than the writer can take between two sends of a tight loop.
        for i in 0..100_000 {
            t.record(ev(i));
        }
        let st = t.status().unwrap();
        t.stop();
        assert_eq!(st.events_total, 100_000);
        assert!(st.dropped_total > 0, "a queue of 1 must overflow");
        assert!(!rotated_path(&path).exists());
        let r = records(&path);
        let written = r.iter().filter(|r| r.op == "get").count() as u64;
        let noted: u64 = r.iter().filter(|r| r.op == "dropped").map(|r| r.size).sum();
        assert_eq!(
            written + noted,
            100_000,
            "every event is written or noted as dropped"
        );
    }
}
