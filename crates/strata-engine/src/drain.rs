//! Drain status: where each file the flusher writes (DEFAULT, and WORKFLOW
//! once staged out: `FileRecord::flushed_like_default`) stands on its way to
//! the destination (control `DrainStatus`). The flusher's event log is
//! `crate::drain_log` (re-exported here).
//!
//! ## Details
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `drain.rs` answers `DrainStatus` (per file the flusher writes — DEFAULT, and WORKFLOW once
//! staged out, `FileRecord::flushed_like_default` —: `dirty`/`flushing`/`persisted`/`failed`
//! with the error and retry time, size, dirty bytes, the record's `flushed_bytes_total`,
//! `stalled` and `verified`; at
//! most `DRAIN_ROWS_MAX` rows, `truncated` beyond) and keeps the **event log**
//! `<socket>.drain.log` (`<unix ns> ENQUEUE|DEQUEUE|DONE|ERROR <path> <bytes> [error]`): the
//! poller and workers `try_send` lines on a bounded queue (full → dropped and counted in a NOTE
//! line), one writer thread appends them and truncates the file with a NOTE at
//! `EVENT_LOG_BYTES_MAX` (64 MiB).

use strata_proto::control::{DrainFile, DrainReply, DrainState};

use crate::core::Core;
pub use crate::drain_log::{
    event_log_path, EventLog, EventSink, EVENT_LOG_BYTES_MAX, EVENT_QUEUE_MAX,
};
use crate::flush::{matches, Flusher};

/// Rows in one `DrainStatus` answer; `truncated` says more exist.
pub const DRAIN_ROWS_MAX: usize = 100_000;
/// Estimated JSON bytes of one answer (below the 16 MiB control frame).
pub const DRAIN_REPLY_BYTES_MAX: usize = 12 << 20;

/// The drain row of one file.
fn drain_file(
    core: &Core,
    flusher: Option<&Flusher>,
    id: strata_meta::BucketId,
    path: &str,
    rec: &strata_meta::FileRecord,
    now: u64,
) -> DrainFile {
    let needs = rec.needs_flush();
    let in_flight = flusher.is_some_and(|f| f.is_in_flight(id));
    let backoff = core.files.backoff.get(&id);
    let state = if in_flight {
        DrainState::Flushing
    } else if !needs {
        DrainState::Persisted
    } else if backoff.is_some() && rec.flush_error.is_some() {
        // Waiting for a retry. (A kicked file has no backoff: it is dirty
        // again until its next attempt ends.)
        DrainState::Failed
    } else {
        DrainState::Dirty
    };
    DrainFile {
        path: path.to_string(),
        state,
        size_bytes: rec.size,
        dirty_bytes: if needs { core.file_dirty_bytes(id) } else { 0 },
        flushed_bytes_total: rec.flushed_bytes_total,
        error: rec.flush_error.clone(),
        retry_in_ms: match (state, backoff) {
            (DrainState::Failed, Some(b)) => {
                Some(b.retry_at_mono_ns.saturating_sub(now) / 1_000_000)
            }
            _ => None,
        },
        failures: backoff.map_or(0, |b| b.failures),
        flushing_ms: flusher
            .and_then(|f| f.in_flight_for_ns(id, now))
            .map(|ns| ns / 1_000_000),
        stalled: flusher.is_some_and(|f| f.is_stalled(id, now)),
        verified: state == DrainState::Persisted && flusher.is_some_and(|f| f.is_verified(id, rec)),
    }
}

/// Control `DrainStatus`: one row per DEFAULT or staged-out WORKFLOW file under `paths` (sorted by
/// path, at most `DRAIN_ROWS_MAX` rows / `DRAIN_REPLY_BYTES_MAX` bytes).
pub fn drain_status(core: &Core, flusher: Option<&Flusher>, paths: &[String]) -> DrainReply {
    drain_status_limited(core, flusher, paths, DRAIN_ROWS_MAX)
}

/// `drain_status` with at most `rows_max` rows.
pub fn drain_status_limited(
    core: &Core,
    flusher: Option<&Flusher>,
    paths: &[String],
    rows_max: usize,
) -> DrainReply {
    let now = core.mono_ns();
    let mut ids: Vec<(&str, strata_meta::BucketId)> = core
        .meta
        .files()
        .filter(|(id, name, rec)| {
            rec.flushed_like_default() && !core.file_is_orphan(*id) && matches(name, paths)
        })
        .map(|(id, name, _)| (name, id))
        .collect();
    ids.sort_unstable();
    let mut r = DrainReply {
        log_path: flusher
            .and_then(|f| f.log_path())
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        ..DrainReply::default()
    };
    let mut bytes = 0usize;
    for (name, id) in ids {
        let Ok(rec) = core.meta.file(id) else {
            continue;
        };
        let row = drain_file(core, flusher, id, name, rec, now);
        match row.state {
            DrainState::Dirty => r.dirty_files += 1,
            DrainState::Flushing => r.flushing_files += 1,
            DrainState::Failed => r.failed_files += 1,
            DrainState::Persisted => r.persisted_files += 1,
        }
        r.dirty_bytes += row.dirty_bytes;
        let est = 200 + 2 * row.path.len() + row.error.as_ref().map_or(0, |e| 2 * e.len());
        if r.truncated || r.files.len() >= rows_max || bytes + est > DRAIN_REPLY_BYTES_MAX {
            r.truncated = true;
            continue;
        }
        bytes += est;
        r.files.push(row);
    }
    r
}
