//! Staging tests with real flusher workers writing into a temporary
//! directory (no timed assertions: completions are awaited).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use strata_meta::{BucketId, Persist};
use strata_proto::control::DrainState;
use strata_proto::types::{DestInfo, TIER_DEST};

use crate::core::{Core, Src};
use crate::files::OpenArgs;
use crate::flush::{FlushIo, FlushSettings, Flusher, FLUSH_OWNER};
use crate::stage::{evict_clean, stage_out, stage_state, stage_state_limited};
use crate::testutil::{fixture, pattern, Fixture};
use crate::Done;

const SHIFT: u32 = 12;
const PAGE: usize = 4096;

fn start(core: &Core) -> (Flusher, mpsc::Receiver<Done>) {
    let (tx, rx) = mpsc::channel();
    let io = FlushIo::open(core, 0.0).unwrap();
    let s = FlushSettings {
        enabled: true,
        interval_ns: 1,
        threads: 2,
        bandwidth_max_mib_s: 0.0,
        ..Default::default()
    };
    (
        Flusher::start(s, io, crate::report(tx, Arc::new(|| {}), Done::Flush)).unwrap(),
        rx,
    )
}

fn create(core: &mut Core, path: &str, persist: Persist) -> BucketId {
    let a = OpenArgs {
        create: true,
        mode: 0o644,
        persist,
        page_shift: SHIFT,
        dest: Some(DestInfo::default()),
        ..OpenArgs::default()
    };
    core.file_open(path, &a).unwrap()
}

fn write(core: &mut Core, id: BucketId, off: usize, data: &[u8]) {
    core.file_write(id, Some(off as u64), Src::Bytes(data), None)
        .unwrap();
}

/// Ticks and completes until nothing is in flight (a generous guard, not a timing check).
fn run_flusher(core: &mut Core, f: &mut Flusher, rx: &mpsc::Receiver<Done>) {
    for _ in 0..10_000 {
        core.files.kick = true;
        f.tick(core);
        if f.in_flight() == 0 {
            return;
        }
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Done::Flush(d)) => f.complete(core, *d),
            Ok(_) => panic!("unexpected message"),
            Err(e) => panic!("no flush completion: {e}"),
        }
    }
    panic!("flush did not converge");
}

fn dest(f: &Fixture, name: &str) -> String {
    f.dir.path().join(name).to_str().unwrap().to_string()
}

fn paths(p: &[&str]) -> Vec<String> {
    p.iter().map(|s| s.to_string()).collect()
}

#[test]
fn workflow_waits_for_stage_out_then_is_flushed_durably_and_stays_flushed() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    let dir = dest(&fx, "wf");
    std::fs::create_dir(&dir).unwrap();
    let (a, b) = (format!("{dir}/a.bin"), format!("{dir}/sub/b.bin"));
    std::fs::create_dir(format!("{dir}/sub")).unwrap();
    let (mut f, rx) = start(&fx.core);
    let core = &mut fx.core;
    let ia = create(core, &a, Persist::Workflow);
    let ib = create(core, &b, Persist::Workflow);
    let da = pattern(3 * PAGE + 17, 3);
    let db = pattern(PAGE, 9);
    write(core, ia, 0, &da);
    write(core, ib, 0, &db);
    // Not flushed on its own.
    run_flusher(core, &mut f, &rx);
    assert!(!std::path::Path::new(&a).exists() && !std::path::Path::new(&b).exists());
    let s = stage_state(core, Some(&f), &paths(&[&dir]));
    assert_eq!(
        (s.dirty_files, s.persisted_files, s.files.len()),
        (2, 0, 2),
        "{s:?}"
    );
    assert_eq!(s.dirty_bytes, (da.len() + db.len()) as u64);
    assert!(s
        .files
        .iter()
        .all(|r| r.mode == "workflow" && !r.staged_out && r.state == DrainState::Dirty));
    core.file_check().unwrap();

    // Stage out one file: only it reaches the destination.
    let r = stage_out(core, Some(&f), &paths(&[&a]), false);
    assert_eq!((r.marked_files, r.files.len()), (1, 1), "{r:?}");
    assert!(r.files[0].staged_out);
    run_flusher(core, &mut f, &rx);
    assert_eq!(std::fs::read(&a).unwrap(), da);
    assert!(!std::path::Path::new(&b).exists());
    let rec = core.meta.file(ia).unwrap();
    assert_eq!(
        rec.synced_gen, rec.mod_gen,
        "stage-out syncs the destination"
    );
    let s = stage_state(core, Some(&f), &paths(&[&dir]));
    assert_eq!((s.persisted_files, s.dirty_files), (1, 1), "{s:?}");
    core.file_check().unwrap();

    // The flag is sticky: later writes are flushed like DEFAULT.
    write(core, ia, 5, b"again");
    assert!(core.files.dirty.contains(&ia));
    run_flusher(core, &mut f, &rx);
    let mut want = da.clone();
    want[5..10].copy_from_slice(b"again");
    assert_eq!(std::fs::read(&a).unwrap(), want);

    // The whole directory.
    let r = stage_out(core, Some(&f), &paths(&[&dir]), false);
    assert_eq!(r.marked_files, 1);
    run_flusher(core, &mut f, &rx);
    assert_eq!(std::fs::read(&b).unwrap(), db);
    let s = stage_state(core, Some(&f), &paths(&[&dir]));
    assert_eq!(
        (s.persisted_files, s.pending_files(), s.dirty_bytes),
        (2, 0, 0),
        "{s:?}"
    );
    // Nothing left to mark.
    assert_eq!(
        stage_out(core, Some(&f), &paths(&[&dir]), false).marked_files,
        0
    );
    core.file_check().unwrap();
}

#[test]
fn evict_drops_only_clean_persisted_pages_and_reads_go_to_the_destination() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    let path = dest(&fx, "e.bin");
    let (mut f, rx) = start(&fx.core);
    let core = &mut fx.core;
    let id = create(core, &path, Persist::Workflow);
    let data = pattern(4 * PAGE + 100, 5);
    write(core, id, 0, &data);
    // Not persisted yet: evict changes nothing (every page is dirty).
    let r = stage_out(core, Some(&f), &paths(&[&path]), true);
    assert_eq!(r.evicted_bytes, 0);
    assert_eq!(evict_clean(core, id), 0, "dirty pages are never evicted");
    run_flusher(core, &mut f, &rx);
    assert_eq!(std::fs::read(&path).unwrap(), data);
    // Dirty again on page 1 only.
    write(core, id, PAGE + 1, b"x");
    let before = stage_state(core, Some(&f), &paths(&[&path]));
    assert_eq!(before.buffered_bytes, data.len() as u64);
    // Evicting the file while it is not persisted keeps the dirty page.
    let freed = evict_clean(core, id);
    assert_eq!(freed, (data.len() - PAGE) as u64);
    let rec = core.meta.file(id).unwrap();
    assert_eq!(rec.dirty_pages.iter().copied().collect::<Vec<_>>(), vec![1]);
    assert!(core.meta.page_blob(id, 1).is_some() && core.meta.page_blob(id, 0).is_none());
    core.file_check().unwrap();
    // Evicted pages read from the destination; the dirty one from the buffer.
    let mut ext = Vec::new();
    core.file_read((1, 0), id, 0, data.len() as u64, &mut ext, 1024)
        .unwrap();
    assert!(ext
        .iter()
        .any(|e| e.tier == TIER_DEST && e.logical_off == 0));
    assert!(ext.iter().any(|e| e.tier != TIER_DEST
        && e.logical_off <= PAGE as u64 + 1
        && e.logical_off + e.len > PAGE as u64 + 1));
    core.unpin_all((1, 0));
    // Stage out, then evict everything.
    stage_out(core, Some(&f), &paths(&[&path]), false);
    run_flusher(core, &mut f, &rx);
    let r = stage_out(core, Some(&f), &paths(&[&path]), true);
    assert_eq!(r.evicted_bytes, PAGE as u64);
    assert_eq!(r.buffered_bytes, 0);
    assert_eq!(r.persisted_files, 1);
    let mut want = data.clone();
    want[PAGE + 1] = b'x';
    assert_eq!(std::fs::read(&path).unwrap(), want);
    core.file_check().unwrap();
}

#[test]
fn evict_of_a_page_pinned_by_a_reader_is_deferred() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    let path = dest(&fx, "p.bin");
    let (mut f, rx) = start(&fx.core);
    let core = &mut fx.core;
    let id = create(core, &path, Persist::Default);
    let data = pattern(2 * PAGE, 7);
    write(core, id, 0, &data);
    run_flusher(core, &mut f, &rx);
    let mut ext = Vec::new();
    core.file_read((1, 0), id, 0, data.len() as u64, &mut ext, 1024)
        .unwrap();
    assert!(ext.iter().all(|e| e.tier != TIER_DEST));
    let r = stage_out(core, Some(&f), &paths(&[&path]), true);
    assert_eq!(r.evicted_bytes, data.len() as u64);
    // The reader still holds its pin: the space is not reusable until unpinned.
    core.unpin_all((1, 0));
    core.unpin_all(FLUSH_OWNER);
    core.file_check().unwrap();
}

#[test]
fn scratch_files_are_counted_not_staged_and_rows_are_bounded() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    let dir = dest(&fx, "m");
    std::fs::create_dir(&dir).unwrap();
    let (mut f, rx) = start(&fx.core);
    let core = &mut fx.core;
    let s = create(core, &format!("{dir}/s"), Persist::Scratch);
    write(core, s, 0, b"scratch");
    for i in 0..5 {
        let id = create(core, &format!("{dir}/d{i}"), Persist::Default);
        write(core, id, 0, b"default");
    }
    let r = stage_out(core, Some(&f), &paths(&[&dir]), true);
    assert_eq!((r.scratch_files, r.files.len()), (1, 5), "{r:?}");
    run_flusher(core, &mut f, &rx);
    assert!(!std::path::Path::new(&format!("{dir}/s")).exists());
    let r = stage_state_limited(core, Some(&f), &paths(&[&dir]), 2);
    assert!(
        r.truncated && r.files.len() == 2 && r.persisted_files == 5,
        "{r:?}"
    );
    // A scratch file's pages stay.
    assert_eq!(evict_clean(core, s), 0);
    // Unrelated prefixes match nothing ("/m" must not match "/mx").
    let r = stage_state(core, Some(&f), &paths(&[&format!("{dir}x")]));
    assert!(r.files.is_empty() && r.scratch_files == 0);
    core.file_check().unwrap();
}
