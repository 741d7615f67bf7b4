//! Hung destinations and the flusher's worker pool: a stalled job neither
//! counts against the concurrency limit nor keeps the other files from a
//! worker (spares are started, at most `flush.threads`). Real worker
//! threads; no timed assertions (completions are awaited).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use strata_meta::BucketId;
use strata_proto::control::DrainState;
use strata_proto::types::DestInfo;

use crate::core::{Core, Src};
use crate::files::OpenArgs;
use crate::flush::{FlushIo, FlushSettings, Flusher};
use crate::testutil::fixture;
use crate::Done;

fn start(core: &Core, threads: u32) -> (Flusher, mpsc::Receiver<Done>) {
    let (tx, rx) = mpsc::channel();
    let mut io = FlushIo::open(core, 0.0).unwrap();
    io.hang_marker = Some(".hang".into());
    let s = FlushSettings {
        enabled: true,
        interval_ns: 1,
        threads,
        bandwidth_max_mib_s: 0.0,
        ..Default::default()
    };
    (
        Flusher::start(s, io, crate::report(tx, Arc::new(|| {}), Done::Flush)).unwrap(),
        rx,
    )
}

fn create_with(core: &mut Core, path: &str, data: &[u8]) -> BucketId {
    let a = OpenArgs {
        create: true,
        mode: 0o644,
        page_shift: 12,
        dest: Some(DestInfo::default()),
        ..OpenArgs::default()
    };
    let id = core.file_open(path, &a).unwrap();
    core.file_write(id, Some(0), Src::Bytes(data), None)
        .unwrap();
    id
}

/// Waits for one completion and handles it (a generous guard, not a timing check).
fn complete_one(core: &mut Core, f: &mut Flusher, rx: &mpsc::Receiver<Done>) {
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Done::Flush(d)) => f.complete(core, *d),
        Ok(_) => panic!("unexpected message"),
        Err(e) => panic!("no flush completion: {e}"),
    }
}

/// A hung mount for one path (the flusher's fault injection: a job waits
/// before its open while `<path>.hang` exists); dropping it answers again.
struct Hang(String);
impl Hang {
    fn new(path: &str) -> Hang {
        let m = format!("{path}.hang");
        std::fs::write(&m, b"").unwrap();
        Hang(m)
    }
}
impl Drop for Hang {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_stalled_job_does_not_hold_the_only_worker_or_slot() {
    let mut fx = fixture(8 << 20, 64 << 20, 1 << 20);
    let dir = fx.dir.path().to_str().unwrap().to_string();
    let (hung, fine, hung2) = (
        format!("{dir}/hung"),
        format!("{dir}/fine"),
        format!("{dir}/hung2"),
    );
    // flush.threads = 1: the concurrency limit is 1 and there is one worker.
    let (mut f, rx) = start(&fx.core, 1);
    // Every job in flight counts as stalled at once.
    f.set_stall_warn_ns(1);
    let fifo = Hang::new(&hung);
    let core = &mut fx.core;
    let h = create_with(core, &hung, b"stuck");
    core.files.kick = true;
    f.tick(core);
    assert!(f.is_in_flight(h));
    assert_eq!(f.workers(), 1);

    // Another file gets a slot and a (spare) worker although the only
    // worker is blocked in the hung destination.
    let ok = create_with(core, &fine, b"fine");
    core.files.kick = true;
    f.tick(core);
    assert!(f.is_in_flight(ok), "the stalled job held the only slot");
    assert_eq!(f.workers(), 2, "one spare worker for one stalled job");
    complete_one(core, &mut f, &rx);
    assert!(!f.is_in_flight(ok) && f.is_in_flight(h));
    assert_eq!(std::fs::read(&fine).unwrap(), b"fine");
    let r = crate::drain::drain_status(core, Some(&f), &[fine.clone()]);
    assert_eq!(r.files[0].state, DrainState::Persisted, "{r:?}");
    let r = crate::drain::drain_status(core, Some(&f), &[hung.clone()]);
    assert!(
        r.files[0].state == DrainState::Flushing && r.files[0].stalled,
        "{r:?}"
    );

    // A second hung file takes the spare too; the pool stops growing at
    // 2 × flush.threads whatever else stalls.
    let fifo2 = Hang::new(&hung2);
    let h2 = create_with(core, &hung2, b"stuck too");
    core.files.kick = true;
    f.tick(core);
    assert!(f.is_in_flight(h2));
    core.files.kick = true;
    f.tick(core);
    assert_eq!(f.workers(), 2, "spares are bounded by flush.threads");

    // The mounts answer again: the blocked attempts finish.
    drop(fifo);
    drop(fifo2);
    for _ in 0..10_000 {
        core.files.kick = true;
        f.tick(core);
        if f.in_flight() == 0 {
            break;
        }
        complete_one(core, &mut f, &rx);
    }
    assert!(core.files.dirty.is_empty());
    assert_eq!(std::fs::read(&hung).unwrap(), b"stuck");
    assert_eq!(std::fs::read(&hung2).unwrap(), b"stuck too");
    f.stop();
}
