//! Staging on the daemon side: control `StageOut` and `StageState`
//! (`strata stage-out`, `Client::stage_out`). Poller thread only.
//!
//! * **Stage-out** sets `FileRecord::stage_out` on the WORKFLOW files under
//!   the paths: from then on `needs_flush()` treats them like DEFAULT files,
//!   so the flusher writes them (and keeps writing later changes: the flag is
//!   sticky). Every matching WORKFLOW or DEFAULT file with something to flush
//!   is made urgent and durable (the destination is `fdatasync`ed), and its
//!   retry backoff is dropped so a failed file is tried again now.
//! * **Evict** drops the clean pages of persisted files: pages that are not
//!   dirty and lie wholly below `dest_size`, so read-through returns the same
//!   bytes. Dirty pages are never dropped; pinned extents are freed after
//!   their last unpin (`Core::free_extents`). SCRATCH files and orphans are
//!   left alone.
//! * **State** is computed like the drain status, with WORKFLOW files
//!   included: a WORKFLOW file not staged out with unflushed bytes is `dirty`.
//!   The client's stage-out waits on it.
//!
//! ## Details
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `stage.rs` answers `StageOut` / `StageState` (staging): stage-out sets the record's
//! `stage_out` flag on WORKFLOW files — from then on `needs_flush()` treats them like DEFAULT
//! files (sticky: later writes are flushed too) — and makes every matching WORKFLOW/DEFAULT
//! file urgent and durable; with `evict` it drops the clean pages of persisted files that lie
//! wholly below `dest_size` (never a dirty page; pinned extents are freed after the last unpin),
//! so reads go back to the destination. `StageState` reports DEFAULT and WORKFLOW files like the
//! drain status (a WORKFLOW file not staged out with unflushed bytes is `dirty`) plus buffered bytes.

use strata_meta::{BucketId, FileRecord, Persist};
use strata_proto::control::{DrainState, StageFile, StageReply};

use crate::core::Core;
use crate::flush::{matches, Flusher};

/// Rows in one `Stage` answer; `truncated` says more exist.
pub const STAGE_ROWS_MAX: usize = 100_000;
/// Estimated JSON bytes of one answer (below the 16 MiB control frame).
pub const STAGE_REPLY_BYTES_MAX: usize = 12 << 20;

fn mode_name(p: Persist) -> &'static str {
    match p {
        Persist::Default => "default",
        Persist::Workflow => "workflow",
        Persist::Scratch => "scratch",
    }
}

/// Everything written is at the destination (and synced if asked).
fn persisted(rec: &FileRecord) -> bool {
    rec.mod_gen <= rec.flushed_gen && !(rec.durable && rec.synced_gen < rec.mod_gen)
}

/// Bytes of file `id` held in the buffer (its page blobs, clamped to the size).
fn buffered_bytes(core: &Core, id: BucketId, rec: &FileRecord) -> u64 {
    let Ok(pages) = core.meta.file_pages(id) else {
        return 0;
    };
    pages
        .iter()
        .filter_map(|(p, bid)| {
            core.meta
                .blob(*bid)
                .map(|b| b.size.min(rec.size.saturating_sub(rec.page_start(*p))))
        })
        .sum()
}

fn stage_file(
    core: &Core,
    flusher: Option<&Flusher>,
    id: BucketId,
    path: &str,
    rec: &FileRecord,
) -> StageFile {
    let in_flight = flusher.is_some_and(|f| f.is_in_flight(id));
    let done = persisted(rec);
    let state = if in_flight {
        DrainState::Flushing
    } else if done {
        DrainState::Persisted
    } else if rec.needs_flush() && core.files.backoff.contains_key(&id) && rec.flush_error.is_some()
    {
        DrainState::Failed
    } else {
        DrainState::Dirty
    };
    StageFile {
        path: path.to_string(),
        mode: mode_name(rec.persist).to_string(),
        state,
        staged_out: rec.stage_out,
        size_bytes: rec.size,
        dirty_bytes: if done { 0 } else { core.file_dirty_bytes(id) },
        buffered_bytes: buffered_bytes(core, id, rec),
        error: rec.flush_error.clone(),
    }
}

/// The DEFAULT and WORKFLOW files under `paths` (sorted by path), and the SCRATCH ones.
fn matching(core: &Core, paths: &[String]) -> (Vec<(String, BucketId)>, Vec<BucketId>) {
    let mut scratch = Vec::new();
    let mut ids = Vec::new();
    for (id, name, rec) in core.meta.files() {
        // Shadows (pages this node holds for files other nodes own) have no
        // destination: their owners drain them; never listed, never staged.
        if core.file_is_orphan(id) || is_shadow(name) || !matches(name, paths) {
            continue;
        }
        if rec.persist == Persist::Scratch {
            scratch.push(id);
            continue;
        }
        ids.push((name.to_string(), id));
    }
    ids.sort_unstable();
    (ids, scratch)
}

/// Control `StageState`: the DEFAULT and WORKFLOW files under `paths`.
pub fn stage_state(core: &Core, flusher: Option<&Flusher>, paths: &[String]) -> StageReply {
    stage_state_limited(core, flusher, paths, STAGE_ROWS_MAX)
}

/// `stage_state` with at most `rows_max` rows.
pub fn stage_state_limited(
    core: &Core,
    flusher: Option<&Flusher>,
    paths: &[String],
    rows_max: usize,
) -> StageReply {
    let (ids, scratch) = matching(core, paths);
    let mut r = StageReply {
        scratch_files: scratch.len() as u64,
        ..StageReply::default()
    };
    for id in scratch {
        if let Ok(rec) = core.meta.file(id) {
            r.buffered_bytes += buffered_bytes(core, id, rec);
        }
    }
    let mut bytes = 0usize;
    for (name, id) in ids {
        let Ok(rec) = core.meta.file(id) else {
            continue;
        };
        let row = stage_file(core, flusher, id, &name, rec);
        match row.state {
            DrainState::Dirty => r.dirty_files += 1,
            DrainState::Flushing => r.flushing_files += 1,
            DrainState::Failed => r.failed_files += 1,
            DrainState::Persisted => r.persisted_files += 1,
        }
        r.dirty_bytes += row.dirty_bytes;
        r.buffered_bytes += row.buffered_bytes;
        let est = 250 + 2 * row.path.len() + row.error.as_ref().map_or(0, |e| 2 * e.len());
        if r.truncated || r.files.len() >= rows_max || bytes + est > STAGE_REPLY_BYTES_MAX {
            r.truncated = true;
            continue;
        }
        bytes += est;
        r.files.push(row);
    }
    r
}

/// True for a shadow's record (`strata_proto::types::shadow_path`).
pub(crate) fn is_shadow(name: &str) -> bool {
    name.strip_prefix(strata_proto::types::SHADOW_DIR)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Marks file `id` for stage-out; returns whether it now has a flush to wait for.
fn mark(core: &mut Core, id: BucketId) -> bool {
    let mono = core.mono_ns().max(1);
    debug_assert!(
        core.meta.bucket(id).is_ok_and(|b| !is_shadow(&b.name)),
        "a shadow is never staged out"
    );
    let Ok(rec) = core.meta.file_mut(id) else {
        return false;
    };
    match rec.persist {
        Persist::Scratch => return false,
        Persist::Workflow => rec.stage_out = true,
        Persist::Default => {}
    }
    if persisted(rec) {
        return false;
    }
    // Staged data must survive a power loss at the destination.
    rec.durable = true;
    rec.urgent = true;
    rec.flush_error = None;
    if rec.dirty_since_mono_ns == 0 {
        rec.dirty_since_mono_ns = mono;
    }
    let needs = rec.needs_flush();
    core.files.backoff.remove(&id);
    if needs {
        core.files.dirty.insert(id);
        core.files.kick = true;
    }
    needs
}

/// Drops the clean pages of file `id` that the destination holds; returns
/// the bytes dropped. Never a dirty page, never a page reaching past
/// `dest_size`; nothing of SCRATCH files or orphans.
pub fn evict_clean(core: &mut Core, id: BucketId) -> u64 {
    if core.file_is_orphan(id) {
        return 0;
    }
    let Ok(rec) = core.meta.file(id) else {
        return 0;
    };
    if rec.persist == Persist::Scratch || !rec.dest_exists {
        return 0;
    }
    let (size, dest_size) = (rec.size, rec.dest_size);
    let Ok(pages) = core.meta.file_pages(id) else {
        return 0;
    };
    let mut victims = Vec::new();
    for (p, bid) in pages {
        let Some(b) = core.meta.blob(bid) else {
            continue;
        };
        if b.dirty || rec.dirty_pages.contains(&p) {
            continue;
        }
        let start = rec.page_start(p);
        let end = start.saturating_add(rec.page_bytes).min(size);
        if end > dest_size {
            continue;
        }
        victims.push(bid);
    }
    let mut freed = 0u64;
    for bid in victims {
        if let Some(blob) = core.meta.blob_remove(bid) {
            freed += blob.size;
            core.free_extents(&blob.extents);
        }
    }
    freed
}

/// Control `StageOut`: marks the files under `paths` for stage-out (and
/// evicts clean pages of persisted ones with `evict`), then reports their
/// state.
pub fn stage_out(
    core: &mut Core,
    flusher: Option<&Flusher>,
    paths: &[String],
    evict: bool,
) -> StageReply {
    let (ids, _) = matching(core, paths);
    let mut marked = 0u64;
    let mut evicted = 0u64;
    for (_, id) in &ids {
        // a mapped file's bytes are in its shared backing (files_backing.rs)
        let _ = core.backing_copy_in(*id, false);
        if mark(core, *id) {
            marked += 1;
        }
        let idle = !flusher.is_some_and(|f| f.is_in_flight(*id));
        if evict && idle && core.meta.file(*id).is_ok_and(persisted) {
            evicted += evict_clean(core, *id);
        }
    }
    if evicted > 0 {
        tracing::info!(bytes = evicted, "stage-out evicted clean pages");
    }
    let mut r = stage_state(core, flusher, paths);
    r.marked_files = marked;
    r.evicted_bytes = evicted;
    r
}

#[cfg(test)]
#[path = "stage_tests.rs"]
mod tests;
