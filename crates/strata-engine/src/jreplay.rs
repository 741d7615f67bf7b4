//! Start-up replay: applies the folded journal to an empty `Core`.
//!
//! Every blob record is verified before it is applied: its tier must exist
//! (matched by the tier file's path, so reordering devices in the config is
//! harmless) and be non-volatile, its extents must be block-aligned, lie
//! inside the tier file and not overlap anything already restored (the
//! allocator's `reserve` refuses overlaps), and a sealed blob (fsync'ed)
//! must still match its checksum — a mismatch is reported and the bytes
//! kept (they are the newest the application wrote). A record that fails
//! is not applied and is reported; nothing is applied silently.
//!
//! DEFAULT files come back only with their dirty pages (clean pages are at
//! the destination) and only if they still need a flush; the flusher then
//! drains them as usual. Files keep their ids, and an owner's map of the
//! pages other nodes hold of them (unflushed runs) comes back with them, so
//! the next flush has those nodes write them (issue 15).
//!
//! ## Crash and restart
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! **Crash and restart.** `kill -9` loses RAM and the poller's unsent records; the tier
//! files and the journal's appended batches stay. At start the daemon reads the journal
//! (`journal::read`: fold, skipping corrupt ranges), restores what it describes
//! (`jreplay::replay`), rewrites it atomically from what was restored, and starts the journal
//! thread; the flusher then drains the restored dirty files. Everything acknowledged by
//! fsync was in a synced batch, so it is restored. A restored file counts as synced
//! (`Journal::restored`): it keeps its record in the rewritten journal until the destination
//! has it, even when nothing but metadata is owed (an fsync'ed empty file, a truncation), so a
//! second crash during recovery loses nothing either (`tests/crash.rs`, `scripts/kill9.sh`).

use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeSet;

use strata_alloc::Range;
use strata_meta::pagemap::{PageMap, Run};
use strata_meta::{
    parse_page_name, BucketId, Extent, FileRecord, Persist, PAGE_SHIFT_MAX, PAGE_SHIFT_MIN,
};
use strata_proto::control::ReplayReport;

use crate::core::{now_ns, Core};
use crate::journal::{self, Record, Scan, REPORT_MESSAGES_MAX};

fn note(r: &mut ReplayReport, msg: String) {
    tracing::warn!("journal replay: {msg}");
    if r.messages.len() < REPORT_MESSAGES_MAX {
        r.messages.push(msg);
    }
}

/// Applies `scan` to `core` (which must be empty); returns what happened.
pub fn replay(core: &mut Core, scan: &Scan) -> ReplayReport {
    let started = std::time::Instant::now();
    let mut r = ReplayReport {
        journal_bytes: scan.bytes,
        records: scan.records,
        torn_tail_bytes: scan.torn_tail_bytes,
        ..Default::default()
    };
    for (off, len, why) in &scan.corrupt {
        r.corrupt_ranges += 1;
        r.corrupt_bytes += len;
        tracing::error!(
            offset = off,
            bytes = len,
            "journal replay: corrupt record ({why}); not applied"
        );
        if r.messages.len() < REPORT_MESSAGES_MAX {
            r.messages.push(format!(
                "corrupt journal bytes at offset {off} (+{len}): {why}; not applied"
            ));
        }
    }
    if scan.torn_tail_bytes > 0 {
        tracing::info!(
            bytes = scan.torn_tail_bytes,
            "journal replay: incomplete last record ignored (crash while appending)"
        );
    }
    // Old tier index → current tier index, by tier file path.
    let mut tier_map: HashMap<u32, usize> = HashMap::new();
    for (old, path) in &scan.state.tiers {
        match core
            .tiers
            .tiers
            .iter()
            .position(|t| !t.is_ram() && t.path() == *path)
        {
            Some(i) => {
                tier_map.insert(*old, i);
            }
            None => note(
                &mut r,
                format!(
                    "tier {old} ({path}) is no longer configured: its blobs cannot be restored"
                ),
            ),
        }
    }
    let now = now_ns();
    let mono = core.mono_ns();
    let mut buf = Vec::new();
    // Tiers that received bytes from inside the journal: fdatasync'ed
    // before the journal is rewritten without them.
    let mut synced: BTreeSet<usize> = BTreeSet::new();
    // BlobData records, placed after every BlobSet record reserved its space.
    type Deferred<'a> = (
        BucketId,
        strata_meta::BlobId,
        Option<u64>,
        &'a [(u64, u64)],
        &'a [u8],
    );
    let mut deferred: Vec<Deferred> = Vec::new();
    // Files keep their ids (other nodes hold their pages under them): ids
    // issued from now on, to records the journal did not name, are above.
    let id_max = scan
        .state
        .buckets
        .values()
        .filter_map(|r| match r {
            Record::BucketSet { file: Some(f), .. } => Some(f.id_local),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    core.meta.ids_above(id_max);
    for (name, rec) in &scan.state.buckets {
        let Record::BucketSet { tags, file, .. } = rec else {
            continue;
        };
        let blobs: Vec<&Record> = scan.state.blobs_of(name).map(|(_, b)| b).collect();
        // DEFAULT files: only what still has to reach the destination.
        let persist = file.as_ref().map(|f| Persist::from_u32(f.persist));
        if let Some(None) = persist {
            note(
                &mut r,
                format!("{name}: unknown persist mode; file not restored"),
            );
            continue;
        }
        let persist = persist.flatten();
        let wanted = |b: &Record| match (persist, b) {
            (Some(Persist::Default), Record::BlobSet { dirty, .. }) => *dirty,
            (Some(Persist::Scratch), _) => false,
            _ => true,
        };
        if let (Some(Persist::Default), Some(f)) = (persist, file) {
            let any_dirty = blobs.iter().any(|b| wanted(b));
            if !any_dirty
                && f.held.is_empty()
                && f.trunc_min.is_none()
                && f.dest_exists
                && f.dest_size == f.size
            {
                continue;
            }
        }
        if persist == Some(Persist::Scratch) {
            continue;
        }
        let made = match file.as_ref().map_or(0, |f| f.id_local) {
            0 => core
                .meta
                .bucket_open(name, true, true, now)
                .map(|(id, _)| id),
            local => core.meta.bucket_create_as(name, local, now),
        };
        let id = match made {
            Ok(id) => id,
            Err(e) => {
                note(&mut r, format!("{name}: cannot recreate bucket: {e}"));
                continue;
            }
        };
        for (k, v) in tags {
            if let Err(e) = core.meta.bucket_tag(id, k, v) {
                note(&mut r, format!("{name}: tag {k}: {e}"));
            }
        }
        let mut page_bytes = 0u64;
        if let Some(f) = file {
            let shift = f.page_bytes.trailing_zeros();
            if !f.page_bytes.is_power_of_two()
                || !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&shift)
            {
                note(
                    &mut r,
                    format!("{name}: bad page size {}; file not restored", f.page_bytes),
                );
                let _ = core.meta.bucket_destroy(id);
                continue;
            }
            page_bytes = f.page_bytes;
            let mut fr = FileRecord::new(
                persist.expect("file has a persist mode"),
                shift,
                f.mode,
                now,
            );
            fr.uid = f.uid;
            fr.gid = f.gid;
            fr.mtime_ns = f.mtime_ns;
            fr.ctime_ns = f.ctime_ns;
            fr.atime_ns = f.atime_ns;
            fr.size = f.size;
            fr.dest_size = f.dest_size.min(f.size);
            fr.dest_exists = f.dest_exists;
            fr.trunc_min = f.trunc_min;
            fr.stage_out = f.stage_out;
            if let Err(e) = core.meta.file_attach(id, fr) {
                note(&mut r, format!("{name}: cannot restore file record: {e}"));
                let _ = core.meta.bucket_destroy(id);
                continue;
            }
            restore_held(core, &mut r, name, id, f);
            r.files += 1;
        }
        r.buckets += 1;
        let mut dirty_pages = BTreeSet::new();
        let mut end_max = 0u64;
        for b in blobs {
            if !wanted(b) {
                continue;
            }
            let (bname, size, dirty) = match b {
                Record::BlobSet {
                    name, size, dirty, ..
                } => (name, size, *dirty),
                Record::BlobData { name, size, .. } => (name, size, true),
                _ => continue,
            };
            let page = if file.is_some() {
                match parse_page_name(bname) {
                    Some(p) if *size <= page_bytes => Some(p),
                    _ => {
                        r.dropped_blobs += 1;
                        note(
                            &mut r,
                            format!("{name}: blob {bname:?} is not a valid page; not restored"),
                        );
                        continue;
                    }
                }
            } else {
                None
            };
            let restored = match b {
                Record::BlobSet { crc, extents, .. } => {
                    restore_blob(core, &tier_map, *size, extents, *crc, &mut buf)
                        .map(|(exts, ok)| (exts, ok, *crc))
                }
                // Bytes inside the record go to a non-volatile tier once every
                // record pointing at tier space has reserved it: a hole until then.
                Record::BlobData { crc, .. } => {
                    let hole = (*size > 0).then(|| Extent::hole(0, *size));
                    Ok((hole.into_iter().collect(), true, Some(*crc)))
                }
                _ => continue,
            };
            match restored {
                Ok((exts, crc_ok, crc)) => {
                    let bid = match core.meta.blob_create(id, bname, now) {
                        Ok(b) => b,
                        Err(e) => {
                            core.free_extents(&exts);
                            r.dropped_blobs += 1;
                            note(&mut r, format!("{name}/{bname}: cannot recreate blob: {e}"));
                            continue;
                        }
                    };
                    if let Some(bl) = core.meta.blob_mut(bid) {
                        bl.size = *size;
                        bl.extents = exts;
                        bl.dirty = dirty && persist.is_some();
                        bl.sealed_crc = if crc_ok { crc } else { None };
                    }
                    core.meta.blob_resized(id, 0, *size);
                    if let Record::BlobData { segs, data, .. } = b {
                        deferred.push((id, bid, page, segs, data));
                    }
                    if !crc_ok {
                        r.crc_mismatches += 1;
                        note(&mut r, format!("{name}/{bname}: bytes differ from the checksum sealed at fsync (changed after it, or damaged); kept as found"));
                    }
                    r.blobs += 1;
                    r.bytes += size;
                    if let Some(p) = page {
                        if dirty {
                            dirty_pages.insert(p);
                        }
                        end_max = end_max.max(p * page_bytes + size);
                    }
                }
                Err(why) => {
                    r.dropped_blobs += 1;
                    note(&mut r, format!("{name}/{bname}: {why}; not restored"));
                }
            }
        }
        if let Ok(rec) = core.meta.file_mut(id) {
            let f = file.as_ref().expect("a file record");
            // Bytes past what was synced, the restored pages and the
            // destination's valid bytes never reached a non-volatile tier:
            // the file ends where its durable bytes do.
            // (Pages other nodes hold: journaled there, or lost with them
            // and reported by the flush that needs them.)
            let held_end = core
                .files
                .page_maps
                .get(&id)
                .and_then(|m| m.runs().map(|x| x.last).max())
                .map_or(0, |last| (last + 1).saturating_mul(page_bytes));
            let durable_end = f
                .synced_size
                .max(end_max)
                .max(held_end)
                .max(if f.dest_exists { f.dest_size } else { 0 });
            rec.size = rec.size.min(durable_end).max(end_max);
            rec.dest_size = rec.dest_size.min(rec.size);
            let needs = !dirty_pages.is_empty()
                || held_end > 0
                || rec.trunc_min.is_some()
                || !rec.dest_exists
                || rec.dest_size != rec.size;
            rec.dirty_pages = dirty_pages;
            let (gen, size) = (rec.mod_gen, rec.size);
            let owed = rec.flushed_like_default() && needs;
            if owed {
                rec.mod_gen = 1;
                rec.last_write_mono_ns = mono;
                rec.dirty_since_mono_ns = mono;
                core.files.dirty.insert(id);
                r.dirty_files += 1;
            }
            // What was restored came from the journal, so it was durable
            // there: it stays journaled (even with no page, e.g. an fsync'ed
            // empty file or a truncation) until the destination has it, or a
            // second crash before the flush would lose it.
            if let Some(j) = core.journal.as_mut() {
                j.restored(id, if owed { 1 } else { gen }, size);
            }
        }
    }
    for (_, b) in scan
        .state
        .blobs
        .iter()
        .filter(|((bucket, _), _)| !scan.state.buckets.contains_key(bucket))
    {
        if let Record::BlobSet { bucket, name, .. } | Record::BlobData { bucket, name, .. } = b {
            r.dropped_blobs += 1;
            note(
                &mut r,
                format!("{bucket}/{name}: no bucket record; not restored"),
            );
        }
    }
    // Bounded: one placement per BlobData record.
    for (file, bid, page, segs, data) in deferred {
        let Some((size, name)) = core.meta.blob(bid).map(|b| (b.size, b.name.clone())) else {
            continue;
        };
        match place_inline(core, size, segs, data, &mut synced) {
            Ok(exts) => {
                if let Some(bl) = core.meta.blob_mut(bid) {
                    bl.extents = exts;
                }
            }
            Err(why) => {
                core.meta.blob_remove(bid);
                if let (Some(p), Ok(rec)) = (page, core.meta.file_mut(file)) {
                    rec.dirty_pages.remove(&p);
                }
                r.blobs -= 1;
                r.bytes -= size;
                r.dropped_blobs += 1;
                note(
                    &mut r,
                    format!("blob {name:?} of file {file:?}: bytes inside the journal not placed on a tier: {why}; not restored"),
                );
            }
        }
    }
    for t in synced {
        if let Err(e) = core.tiers.tiers[t].backend.sync() {
            r.dropped_blobs += 1;
            note(
                &mut r,
                format!("fdatasync of tier {t} after placing bytes from the journal: {e}"),
            );
        }
    }
    if let Err(e) = core.check() {
        note(
            &mut r,
            format!("consistency check after replay failed: {e}"),
        );
    }
    if let Err(e) = core.file_check() {
        note(
            &mut r,
            format!("file consistency check after replay failed: {e}"),
        );
    }
    r.elapsed_ms = started.elapsed().as_millis() as u64;
    r
}

/// The owner's map of the pages other nodes hold of file `id` (unflushed,
/// as journaled): the next flush has the holders write them, reads go to
/// them. Runs of a node not in the cluster, of this node, or past the
/// file's size are reported and left out.
fn restore_held(
    core: &mut Core,
    r: &mut ReplayReport,
    name: &str,
    id: BucketId,
    f: &crate::journal::FileImage,
) {
    if f.held.is_empty() {
        return;
    }
    let me = id.node();
    let pages_in_size = f.size.div_ceil(f.page_bytes);
    let mut runs = Vec::with_capacity(f.held.len());
    for h in &f.held {
        if h.holder == me || h.holder > 0xFFFF || h.last >= pages_in_size {
            note(
                r,
                format!(
                    "{name}: pages {}..={} held by node {} cannot be restored (this node, not a node id, or past the file's end)",
                    h.first, h.last, h.holder
                ),
            );
            continue;
        }
        runs.push(Run {
            first: h.first,
            last: h.last,
            holder: h.holder,
            gen: h.gen,
            flushed: false,
        });
    }
    match PageMap::restore(&runs) {
        Ok(map) if !map.is_empty() => {
            r.held_runs += runs.len() as u64;
            // later publishes of any file issue generations above these
            core.files.gen_next = core
                .files
                .gen_next
                .max(map.gen_next())
                .max(crate::core::now_ns());
            core.files.page_maps.insert(id, map);
        }
        Ok(_) => {}
        Err(e) => note(
            r,
            format!("{name}: the map of pages other nodes hold is invalid ({e}); not restored"),
        ),
    }
}

/// Writes the bytes of a `BlobData` record to fresh space on the fastest
/// non-volatile tier with room (the slowest one grows past its capacity
/// rather than lose them); returns the blob's extents, holes included.
/// Adds the tier to `synced` (to be fdatasync'ed).
fn place_inline(
    core: &mut Core,
    size: u64,
    segs: &[(u64, u64)],
    data: &[u8],
    synced: &mut BTreeSet<usize>,
) -> Result<Vec<Extent>, String> {
    // The ranges as extents with holes between (packed_extents' source).
    let mut src = Vec::with_capacity(segs.len() * 2 + 1);
    let mut at = 0u64;
    for &(off, len) in segs {
        if off > at {
            src.push(Extent::hole(at, off - at));
        }
        src.push(Extent {
            logical_off: off,
            len,
            tier: 0,
            phys_off: 0,
        });
        at = off + len;
    }
    if at < size {
        src.push(Extent::hole(at, size - at));
    }
    let block = core.tiers.block_bytes_max();
    let need = crate::stash::data_bytes_in(&src, size, block);
    let Some((t, ranges)) = crate::stash::alloc_target(core, need) else {
        return Err("no non-volatile tier".into());
    };
    let tier = &core.tiers.tiers[t as usize];
    let exts = crate::stash::packed_extents(&src, size, t, tier.block_bytes, &ranges);
    let mut written = 0u64;
    let mut failed = None;
    // Bounded: one write per data extent; segs and data checked on decode.
    for e in exts.iter().filter(|e| !e.is_hole()) {
        let Some(si) = segs
            .iter()
            .position(|s| s.0 <= e.logical_off && e.logical_off < s.0 + s.1)
        else {
            failed = Some("an extent outside the record's ranges".to_string());
            break;
        };
        let before: u64 = segs[..si].iter().map(|s| s.1).sum();
        let from = (before + e.logical_off - segs[si].0) as usize;
        if let Err(x) = tier
            .backend
            .write_at(e.phys_off, &data[from..from + e.len as usize])
        {
            failed = Some(format!("write to tier {}: {x}", tier.name));
            break;
        }
        written += e.len;
    }
    if failed.is_none() && written != data.len() as u64 {
        failed = Some(format!("{written} of {} bytes placed", data.len()));
    }
    // Ranges no extent landed in (all of them on failure) go back.
    if let Some(why) = failed {
        crate::stash::free_unused(core, t, &ranges, &[]);
        return Err(why);
    }
    crate::stash::free_unused(core, t, &ranges, &exts);
    synced.insert(t as usize);
    Ok(exts)
}

/// Validates and reserves a blob's extents; returns them with holes made
/// explicit and whether the sealed checksum (if any) matches.
fn restore_blob(
    core: &mut Core,
    tier_map: &HashMap<u32, usize>,
    size: u64,
    extents: &[Extent],
    crc: Option<u32>,
    buf: &mut Vec<u8>,
) -> Result<(Vec<Extent>, bool), String> {
    let mut out: Vec<Extent> = Vec::with_capacity(extents.len());
    let mut at = 0u64;
    let mut reserved: Vec<(usize, Range)> = Vec::new();
    let undo = |core: &mut Core, reserved: &[(usize, Range)]| {
        for (t, rg) in reserved {
            if let Some(a) = core.tiers.tiers[*t].alloc.as_mut() {
                let _ = a.free(*rg);
            }
        }
    };
    for e in extents {
        let fail = |why: String| -> Result<(Vec<Extent>, bool), String> { Err(why) };
        if e.len == 0
            || e.logical_off < at
            || e.logical_off.checked_add(e.len).is_none_or(|x| x > size)
        {
            undo(core, &reserved);
            return fail(format!("extent {e:?} out of order or past the size {size}"));
        }
        let Some(&t) = tier_map.get(&e.tier) else {
            undo(core, &reserved);
            return fail(format!("extent on unknown tier {}", e.tier));
        };
        let tier = &core.tiers.tiers[t];
        let (file_len, volatile, name, rounded, block) = if tier.is_ram() {
            (0, true, tier.name.clone(), 0, 1)
        } else {
            (
                tier.backend.len_bytes().unwrap_or(0),
                tier.volatile,
                tier.name.clone(),
                tier.round_up(e.len),
                tier.block_bytes,
            )
        };
        if volatile {
            undo(core, &reserved);
            return fail(format!("extent on volatile tier {name}"));
        }
        if e.phys_off % block != 0 || e.phys_off.checked_add(e.len).is_none_or(|x| x > file_len) {
            undo(core, &reserved);
            return fail(format!(
                "extent {e:?} outside the tier file ({file_len} bytes) or misaligned"
            ));
        }
        let a = core.tiers.tiers[t]
            .alloc
            .as_mut()
            .expect("dir tiers have an allocator");
        if e.phys_off + rounded > a.capacity_bytes() {
            a.grow(e.phys_off + rounded);
        }
        let rg = Range {
            off: e.phys_off,
            len: rounded,
        };
        if let Err(x) = a.reserve(rg) {
            undo(core, &reserved);
            return fail(format!("extent {e:?} overlaps restored data ({x})"));
        }
        reserved.push((t, rg));
        if e.logical_off > at {
            out.push(Extent::hole(at, e.logical_off - at));
        }
        out.push(Extent {
            tier: t as u32,
            ..*e
        });
        at = e.end();
    }
    if at < size {
        out.push(Extent::hole(at, size - at));
    }
    for (t, rg) in &reserved {
        let tier = &mut core.tiers.tiers[*t];
        tier.blob_bytes += rg.len;
        tier.blob_extents += 1;
    }
    let mut crc_ok = true;
    if let Some(want) = crc {
        let mut h = crc32fast::Hasher::new();
        // The sealed CRC covers the data bytes in logical order, not the
        // holes (a sparse blob may be far larger than its data).
        for e in &out {
            if e.is_hole() {
                continue;
            }
            let tier = &core.tiers.tiers[e.tier as usize];
            if tier.is_ram() {
                continue;
            }
            if journal::crc_of_tier_range(tier.backend.as_ref(), e.phys_off, e.len, &mut h, buf)
                .is_err()
            {
                crc_ok = false;
            }
        }
        crc_ok &= h.finalize() == want;
    }
    Ok((out, crc_ok))
}
