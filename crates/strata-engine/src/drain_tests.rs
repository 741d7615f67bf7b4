//! Drain status and the event log: state transitions with real flush
//! workers writing into a temporary directory (completions are awaited; no
//! timed assertions).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use strata_meta::BucketId;
use strata_proto::control::{DrainFile, DrainReply, DrainState};
use strata_proto::types::DestInfo;

use crate::core::{Core, Src};
use crate::drain::{self, EventLog};
use crate::files::OpenArgs;
use crate::flush::{self, FlushIo, FlushSettings, Flusher};
use crate::testutil::{fixture, pattern, Fixture};
use crate::Done;

const SHIFT: u32 = 12;
const PAGE: usize = 4096;

fn start(fx: &Fixture) -> (Flusher, mpsc::Receiver<Done>, std::path::PathBuf) {
    let (tx, rx) = mpsc::channel();
    let io = FlushIo::open(&fx.core, 0.0).unwrap();
    let s = FlushSettings {
        enabled: true,
        interval_ns: 1,
        threads: 2,
        bandwidth_max_mib_s: 0.0,
        ..Default::default()
    };
    let log_path = drain::event_log_path(&fx.dir.path().join("d.sock"));
    let log = EventLog::start(&log_path).unwrap();
    (
        Flusher::start_with_log(
            s,
            io,
            crate::report(tx, Arc::new(|| {}), Done::Flush),
            Some(log),
        )
        .unwrap(),
        rx,
        log_path,
    )
}

fn create(core: &mut Core, path: &str, persist: strata_meta::Persist) -> BucketId {
    let a = OpenArgs {
        create: true,
        mode: 0o644,
        page_shift: SHIFT,
        persist,
        dest: Some(DestInfo::default()),
        ..OpenArgs::default()
    };
    core.file_open(path, &a).unwrap()
}

fn write(core: &mut Core, id: BucketId, off: usize, data: &[u8]) {
    core.file_write(id, Some(off as u64), Src::Bytes(data), None)
        .unwrap();
}

fn complete_one(core: &mut Core, f: &mut Flusher, rx: &mpsc::Receiver<Done>) {
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Done::Flush(d)) => f.complete(core, *d),
        Ok(_) => panic!("unexpected message"),
        Err(e) => panic!("no flush completion: {e}"),
    }
}

fn row<'a>(r: &'a DrainReply, path: &str) -> &'a DrainFile {
    r.files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("{path} not in {r:?}"))
}

fn status(core: &Core, f: &Flusher, paths: &[&str]) -> DrainReply {
    drain::drain_status(
        core,
        Some(f),
        &paths.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    )
}

/// (kind, path, bytes) of the event lines; NOTE lines are skipped.
fn events(path: &std::path::Path) -> Vec<(String, String, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for l in text.lines() {
        let mut it = l.splitn(5, ' ');
        let t: u128 = it
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("time of {l:?}"));
        assert!(t > 0);
        let kind = it.next().unwrap().to_string();
        if kind == "NOTE" {
            continue;
        }
        let p = it.next().unwrap().to_string();
        let bytes: u64 = it
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("bytes of {l:?}"));
        out.push((kind, p, bytes));
    }
    out
}

#[test]
fn dirty_flushing_persisted_with_bytes_and_events() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    std::fs::create_dir_all(fx.dir.path().join("a")).unwrap();
    let pa = fx.dir.path().join("a/x.bin").to_str().unwrap().to_string();
    let pb = fx.dir.path().join("b.bin").to_str().unwrap().to_string();
    let ps = fx
        .dir
        .path()
        .join("a/scratch.bin")
        .to_str()
        .unwrap()
        .to_string();
    let (mut f, rx, log) = start(&fx);
    let core = &mut fx.core;
    let a = create(core, &pa, strata_meta::Persist::Default);
    let _b = create(core, &pb, strata_meta::Persist::Default);
    let s = create(core, &ps, strata_meta::Persist::Scratch);
    let n = 2 * PAGE + 300;
    write(core, a, 0, &pattern(n, 1));
    write(core, s, 0, &pattern(10, 2));

    // Dirty; b was created but never written: dirty too (the empty file must
    // be created at the destination), with no dirty bytes.
    let r = status(core, &f, &[]);
    assert_eq!(r.files.len(), 2, "SCRATCH files are not listed: {r:?}");
    assert!(
        r.files.windows(2).all(|w| w[0].path < w[1].path),
        "sorted by path"
    );
    let x = row(&r, &pa);
    assert_eq!(
        (x.state, x.size_bytes, x.dirty_bytes, x.flushed_bytes_total),
        (DrainState::Dirty, n as u64, n as u64, 0)
    );
    assert!(x.error.is_none() && x.retry_in_ms.is_none());
    let y = row(&r, &pb);
    assert_eq!(
        (y.state, y.size_bytes, y.dirty_bytes),
        (DrainState::Dirty, 0, 0)
    );
    assert_eq!(
        (r.dirty_files, r.persisted_files, r.dirty_bytes, r.truncated),
        (2, 0, n as u64, false)
    );
    assert_eq!(r.log_path, log.display().to_string());
    // Exact file and directory prefixes.
    let dir_a = fx.dir.path().join("a").to_str().unwrap().to_string();
    assert_eq!(status(core, &f, &[&dir_a]).files.len(), 1);
    assert_eq!(status(core, &f, &[&format!("{dir_a}/")]).files.len(), 1);
    assert_eq!(status(core, &f, &[&pb]).files[0].path, pb);
    assert!(
        status(core, &f, &[&format!("{dir_a}/x")]).files.is_empty(),
        "a prefix is a path, not a string prefix"
    );

    // Flushing while the job is in flight.
    core.files.kick = true;
    f.tick(core);
    assert_eq!(f.in_flight(), 2);
    let r = status(core, &f, &[&pa]);
    assert_eq!(
        (r.files[0].state, r.flushing_files),
        (DrainState::Flushing, 1)
    );

    // Persisted.
    complete_one(core, &mut f, &rx);
    complete_one(core, &mut f, &rx);
    assert_eq!(status(core, &f, &[]).persisted_files, 2);
    let x = status(core, &f, &[&pa]).files[0].clone();
    assert_eq!(
        (x.state, x.dirty_bytes, x.flushed_bytes_total),
        (DrainState::Persisted, 0, n as u64)
    );
    assert_eq!(std::fs::read(&pa).unwrap(), pattern(n, 1));

    // Written again: dirty, then persisted with the bytes added.
    write(core, a, 0, &pattern(PAGE, 3));
    assert_eq!(status(core, &f, &[&pa]).files[0].state, DrainState::Dirty);
    core.files.kick = true;
    f.tick(core);
    complete_one(core, &mut f, &rx);
    let x = status(core, &f, &[&pa]).files[0].clone();
    assert_eq!(
        (x.state, x.flushed_bytes_total),
        (DrainState::Persisted, (n + PAGE) as u64)
    );

    f.stop();
    let ev: Vec<_> = events(&log).into_iter().filter(|e| e.1 == pa).collect();
    let kinds: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        kinds,
        ["ENQUEUE", "DEQUEUE", "DONE", "ENQUEUE", "DEQUEUE", "DONE"],
        "{ev:?}"
    );
    assert!(ev.iter().all(|e| e.1 == pa));
    assert_eq!(ev[2].2, n as u64);
    assert_eq!(ev[5].2, PAGE as u64);
}

#[test]
fn failed_with_error_and_retry_then_fixed_is_persisted() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    // The destination's parent is a file: open fails (also as root).
    let blocker = fx.dir.path().join("blocker");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let p = blocker.join("f.bin").to_str().unwrap().to_string();
    let (mut f, rx, log) = start(&fx);
    let core = &mut fx.core;
    let id = create(core, &p, strata_meta::Persist::Default);
    let data = pattern(PAGE + 7, 4);
    write(core, id, 0, &data);
    core.files.kick = true;
    f.tick(core);
    complete_one(core, &mut f, &rx);
    let r = status(core, &f, &[]);
    let x = &r.files[0];
    assert_eq!(x.state, DrainState::Failed);
    assert!(
        x.error.as_deref().is_some_and(|e| e.contains("open")),
        "{x:?}"
    );
    assert!(x.retry_in_ms.is_some() && x.failures == 1, "{x:?}");
    assert_eq!(
        (x.dirty_bytes, x.flushed_bytes_total),
        (data.len() as u64, 0)
    );
    assert_eq!((r.failed_files, r.pending_files()), (1, 1));

    // Fixed, then kicked (control Flush): dirty again (error kept until a
    // success), then persisted.
    std::fs::remove_file(&blocker).unwrap();
    std::fs::create_dir(&blocker).unwrap();
    flush::flush_paths(core, &f, &[]);
    let x = status(core, &f, &[]).files[0].clone();
    assert_eq!(x.state, DrainState::Dirty, "{x:?}");
    assert!(x.error.is_some() && x.retry_in_ms.is_none());
    f.tick(core);
    complete_one(core, &mut f, &rx);
    let x = status(core, &f, &[]).files[0].clone();
    assert_eq!(
        (
            x.state,
            x.error.as_deref(),
            x.failures,
            x.flushed_bytes_total
        ),
        (DrainState::Persisted, None, 0, data.len() as u64)
    );
    assert_eq!(std::fs::read(&p).unwrap(), data);

    f.stop();
    let kinds: Vec<String> = events(&log).into_iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        ["ENQUEUE", "DEQUEUE", "ERROR", "ENQUEUE", "DEQUEUE", "DONE"]
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().nth(2).unwrap().contains("open"), "{text}");
}

#[test]
fn row_limit_sets_truncated_and_counts_everything() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    let (f, _rx, _log) = start(&fx);
    let core = &mut fx.core;
    let mut paths = Vec::new();
    for i in 0..3 {
        let p = fx
            .dir
            .path()
            .join(format!("f{i}"))
            .to_str()
            .unwrap()
            .to_string();
        let id = create(core, &p, strata_meta::Persist::Default);
        write(core, id, 0, b"abc");
        paths.push(p);
    }
    let r = drain::drain_status_limited(core, Some(&f), &[], 2);
    assert!(r.truncated);
    assert_eq!(
        r.files.iter().map(|x| x.path.clone()).collect::<Vec<_>>(),
        paths[..2]
    );
    assert_eq!((r.dirty_files, r.dirty_bytes), (3, 9));
    assert!(!drain::drain_status_limited(core, Some(&f), &[], 3).truncated);
}

#[test]
fn event_log_is_capped_and_counts_dropped_lines() {
    let dir = tempfile::tempdir().unwrap();
    // Cap: truncated with a note, never above the cap plus one note.
    let p = dir.path().join("capped.log");
    let mut log = EventLog::start_capped(&p, 4096, 1 << 16).unwrap();
    let sink = log.sink().unwrap();
    for i in 0..1000 {
        sink.event("DONE", &format!("/x/{i}"), i);
    }
    drop(sink);
    log.stop();
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.len() <= 4096 + 200, "{} bytes", text.len());
    assert!(
        text.starts_with(|c: char| c.is_ascii_digit())
            && text.lines().next().unwrap().contains("NOTE log truncated"),
        "{text}"
    );
    assert!(text.contains("DONE /x/999 999\n"));

    // A tiny queue: lines are dropped, never blocked on; written + dropped = sent.
    let p = dir.path().join("small.log");
    let mut log = EventLog::start_capped(&p, 64 << 20, 2).unwrap();
    let sink = log.sink().unwrap();
    let sent = 20_000u64;
    for i in 0..sent {
        sink.event("ENQUEUE", "/p\nq", i);
    }
    drop(sink);
    log.stop();
    let text = std::fs::read_to_string(&p).unwrap();
    let written = text
        .lines()
        .filter(|l| l.contains(" ENQUEUE /p\\nq "))
        .count() as u64;
    let dropped: u64 = text
        .lines()
        .filter(|l| l.contains(" NOTE ") && l.contains("dropped"))
        .map(|l| l.split(' ').nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        written + dropped,
        sent,
        "{written} written, {dropped} dropped"
    );
}

#[test]
fn staged_out_workflow_files_are_listed_until_persisted() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    let pw = fx.dir.path().join("w.bin").to_str().unwrap().to_string();
    let pk = fx.dir.path().join("kept.bin").to_str().unwrap().to_string();
    let (mut f, rx, log) = start(&fx);
    let core = &mut fx.core;
    let w = create(core, &pw, strata_meta::Persist::Workflow);
    let k = create(core, &pk, strata_meta::Persist::Workflow);
    let data = pattern(PAGE + 99, 7);
    write(core, w, 0, &data);
    write(core, k, 0, b"stays in the buffer");
    // WORKFLOW files are not the flusher's business until staged out.
    let r = status(core, &f, &[]);
    assert!(r.files.is_empty() && r.pending_files() == 0, "{r:?}");
    crate::stage::stage_out(core, Some(&f), std::slice::from_ref(&pw), false);
    let r = status(core, &f, &[]);
    assert_eq!(r.files.len(), 1, "only the staged-out file: {r:?}");
    let x = row(&r, &pw);
    assert_eq!(
        (x.state, x.dirty_bytes),
        (DrainState::Dirty, data.len() as u64)
    );
    // `strata drain wait` waits on exactly these counts.
    assert_eq!(r.pending_files(), 1);
    core.files.kick = true;
    f.tick(core);
    assert_eq!(
        status(core, &f, &[&pw]).files[0].state,
        DrainState::Flushing
    );
    complete_one(core, &mut f, &rx);
    let r = status(core, &f, &[]);
    assert_eq!(
        (row(&r, &pw).state, r.persisted_files, r.pending_files()),
        (DrainState::Persisted, 1, 0)
    );
    assert_eq!(std::fs::read(&pw).unwrap(), data);
    assert!(!std::path::Path::new(&pk).exists());
    let _ = k;
    f.stop();
    assert!(events(&log).iter().any(|e| e.0 == "DONE" && e.1 == pw));
}
