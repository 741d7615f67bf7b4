//! Tests of the journal: record codec, fold, torn tails, corruption, and
//! the whole cycle on a real core (write → fsync via the stash → "crash" →
//! replay → identical bytes, dirty pages resumed).

use std::sync::{mpsc, Arc};

use strata_meta::{Extent, Persist};
use strata_proto::types::DestInfo;

use crate::core::{Core, Src};
use crate::files::OpenArgs;
use crate::journal::{self, FileImage, Record, State};
use crate::jpoller::Journal;
use crate::testutil::{fixture, fixture_in, journal_seqs, pattern, Fixture};
use crate::Done;

fn sample() -> Vec<Record> {
    let file = FileImage {
        size: 10_000,
        mode: 0o640,
        uid: 1,
        gid: 2,
        persist: 0,
        page_bytes: 4096,
        mtime_ns: 5,
        ctime_ns: 6,
        atime_ns: 7,
        dest_size: 100,
        dest_exists: true,
        trunc_min: Some(50),
        stage_out: true,
        synced_size: 9000,
        id_local: 0,
        held: vec![],
    };
    vec![
        Record::Tier {
            index: 1,
            path: "/x/strata-tier.data".into(),
        },
        Record::BucketSet {
            name: "b".into(),
            tags: vec![("placement".into(), "random".into())],
            file: None,
        },
        Record::BucketSet {
            name: "/d/f".into(),
            tags: vec![],
            file: Some(file),
        },
        Record::BlobSet {
            bucket: "b".into(),
            name: "k".into(),
            size: 10,
            dirty: false,
            crc: None,
            extents: vec![Extent {
                logical_off: 0,
                len: 10,
                tier: 1,
                phys_off: 4096,
            }],
        },
        Record::BlobSet {
            bucket: "/d/f".into(),
            name: "0".into(),
            size: 4096,
            dirty: true,
            crc: Some(0xdead),
            extents: vec![Extent {
                logical_off: 0,
                len: 4096,
                tier: 1,
                phys_off: 8192,
            }],
        },
        Record::BlobDrop {
            bucket: "b".into(),
            name: "k".into(),
        },
        Record::BlobSet {
            bucket: "b".into(),
            name: "k2".into(),
            size: 0,
            dirty: false,
            crc: None,
            extents: vec![],
        },
        Record::BlobData {
            bucket: "b".into(),
            name: "k3".into(),
            size: 9000,
            crc: 7,
            segs: vec![(0, 3), (8000, 1000)],
            data: Arc::new(pattern(1003, 4)),
        },
        Record::BlobData {
            bucket: "b".into(),
            name: "k4".into(),
            size: 0,
            crc: 0,
            segs: vec![],
            data: Arc::new(vec![]),
        },
        Record::BucketDrop {
            name: "/d/f".into(),
        },
    ]
}

#[test]
fn inline_records_decode_only_when_their_ranges_cover_the_data() {
    let good = Record::BlobData {
        bucket: "b".into(),
        name: "k".into(),
        size: 100,
        crc: 1,
        segs: vec![(10, 5), (50, 5)],
        data: Arc::new(vec![9; 10]),
    };
    let bytes = encode(std::slice::from_ref(&good));
    let scan = journal::scan_bytes(&bytes);
    assert_eq!(scan.records, 1);
    assert_eq!(scan.state.inline_bytes, 10);
    // Ranges out of order, past the size, or not adding up to the data.
    for segs in [
        vec![(50, 5), (10, 5)],
        vec![(10, 5), (98, 5)],
        vec![(10, 4), (50, 5)],
    ] {
        let Record::BlobData { data, .. } = &good else {
            unreachable!()
        };
        // Built by hand: encode() refuses ranges that do not cover the data.
        let mut p = Vec::new();
        for s in ["b", "k"] {
            p.extend_from_slice(&(s.len() as u32).to_le_bytes());
            p.extend_from_slice(s.as_bytes());
        }
        p.extend_from_slice(&100u64.to_le_bytes());
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&(segs.len() as u32).to_le_bytes());
        for (o, l) in &segs {
            p.extend_from_slice(&(*o as u64).to_le_bytes());
            p.extend_from_slice(&(*l as u64).to_le_bytes());
        }
        p.extend_from_slice(data);
        let mut frame = Vec::new();
        good.encode(&mut frame);
        let scan = journal::scan_bytes(&reframe(&frame, &p));
        assert_eq!(scan.records, 0, "{segs:?}");
        assert_eq!(scan.corrupt.len(), 1, "{segs:?}");
    }
    // The fold counts the live inline bytes: replaced, dropped, bucket dropped.
    let mut st = State::default();
    st.apply(good.clone());
    st.apply(good.clone());
    assert_eq!(st.inline_bytes, 10);
    st.apply(Record::BlobDrop {
        bucket: "b".into(),
        name: "k".into(),
    });
    assert_eq!(st.inline_bytes, 0);
    st.apply(good);
    st.apply(Record::BucketDrop { name: "b".into() });
    assert_eq!(st.inline_bytes, 0);
}

fn encode(records: &[Record]) -> Vec<u8> {
    let mut out = journal::FILE_MAGIC.to_vec();
    for r in records {
        r.encode(&mut out);
    }
    out
}

fn fold(records: &[Record]) -> State {
    let mut s = State::default();
    for r in records {
        s.apply(r.clone());
    }
    s
}

fn same(a: &State, b: &State) -> bool {
    a.tiers == b.tiers && a.buckets == b.buckets && a.blobs == b.blobs
}

#[test]
fn records_round_trip_and_fold_keeps_the_last_state() {
    let recs = sample();
    let scan = journal::scan_bytes(&encode(&recs));
    assert_eq!(scan.records, recs.len() as u64);
    assert!(scan.corrupt.is_empty() && scan.torn_tail_bytes == 0);
    assert!(same(&scan.state, &fold(&recs)));
    // The drop of the file bucket took its page with it; k was dropped,
    // k2 lives, and so do the inline k3 and k4.
    assert!(scan.state.buckets.contains_key("b") && !scan.state.buckets.contains_key("/d/f"));
    assert_eq!(
        scan.state.blobs.keys().cloned().collect::<Vec<_>>(),
        ["k2", "k3", "k4"].map(|k| ("b".to_string(), k.to_string()))
    );
    assert_eq!(scan.state.inline_bytes, 1003);
}

/// The owner's map of pages other nodes hold, and the record's id, ride at
/// the end of a file's record (issue 15); a journal written before them
/// (the record ends at `synced_size`) still reads, with neither.
#[test]
fn held_runs_and_the_id_round_trip_and_older_records_still_read() {
    let image = FileImage {
        size: 1 << 20,
        mode: 0o644,
        uid: 0,
        gid: 0,
        persist: 0,
        page_bytes: 65536,
        mtime_ns: 1,
        ctime_ns: 2,
        atime_ns: 3,
        dest_size: 0,
        dest_exists: false,
        trunc_min: None,
        stage_out: false,
        synced_size: 0,
        id_local: 42,
        held: vec![
            journal::HeldRun {
                holder: 1,
                first: 0,
                last: 3,
                gen: 7,
            },
            journal::HeldRun {
                holder: 2,
                first: 4,
                last: 15,
                gen: 9,
            },
        ],
    };
    let rec = Record::BucketSet {
        name: "/d/held".into(),
        tags: vec![],
        file: Some(image.clone()),
    };
    let bytes = encode(std::slice::from_ref(&rec));
    let scan = journal::scan_bytes(&bytes);
    assert!(scan.corrupt.is_empty(), "{:?}", scan.corrupt);
    assert_eq!(scan.state.buckets.get("/d/held"), Some(&rec));
    // The same record as an older daemon wrote it: no id, no runs.
    let mut frame = Vec::new();
    rec.encode(&mut frame);
    let extra = 8 + 4 + 2 * 28;
    let old = reframe(&frame, &frame[journal::HEADER_BYTES..frame.len() - extra]);
    let scan = journal::scan_bytes(&old);
    assert!(scan.corrupt.is_empty(), "{:?}", scan.corrupt);
    let want = Record::BucketSet {
        name: "/d/held".into(),
        tags: vec![],
        file: Some(FileImage {
            id_local: 0,
            held: vec![],
            ..image
        }),
    };
    assert_eq!(scan.state.buckets.get("/d/held"), Some(&want));
    // A reversed run (first page 20 > last 15) is a corrupt record, never applied.
    let mut payload = frame[journal::HEADER_BYTES..].to_vec();
    let at = payload.len() - 24;
    payload[at..at + 8].copy_from_slice(&20u64.to_le_bytes());
    let scan = journal::scan_bytes(&reframe(&frame, &payload));
    assert_eq!(scan.corrupt.len(), 1, "{:?}", scan.corrupt);
    assert!(scan.state.buckets.is_empty());
}

/// A journal holding one frame of `frame`'s kind with `payload`, its CRC
/// computed again.
fn reframe(frame: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = journal::FILE_MAGIC.to_vec();
    let start = out.len();
    out.extend_from_slice(&frame[..4]);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out[start + 2..start + 8]);
    h.update(payload);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(payload);
    out
}

#[test]
fn a_torn_tail_yields_exactly_a_prefix_of_the_records() {
    let recs = sample();
    let bytes = encode(&recs);
    // Every possible crash point while appending.
    for cut in journal::FILE_MAGIC.len()..bytes.len() {
        let scan = journal::scan_bytes(&bytes[..cut]);
        assert!(
            scan.corrupt.is_empty(),
            "cut {cut}: a torn tail is not corruption"
        );
        let k = scan.records as usize;
        assert!(
            same(&scan.state, &fold(&recs[..k])),
            "cut {cut}: state is not the fold of the first {k} records"
        );
        assert_eq!(
            encode(&recs[..k]).len() as u64 + scan.torn_tail_bytes,
            cut as u64,
            "cut {cut}: the torn tail is what follows the last whole record"
        );
    }
}

#[test]
fn a_corrupt_record_is_reported_and_never_applied() {
    let recs = sample();
    let mut bytes = encode(&recs);
    // Flip one payload byte of the fourth record (the blob "k").
    let mut at = journal::FILE_MAGIC.len();
    for r in &recs[..3] {
        let mut v = Vec::new();
        r.encode(&mut v);
        at += v.len();
    }
    bytes[at + journal::HEADER_BYTES + 3] ^= 0x40;
    let scan = journal::scan_bytes(&bytes);
    assert_eq!(
        scan.corrupt.len(),
        1,
        "one corrupt range: {:?}",
        scan.corrupt
    );
    assert!(scan.corrupt[0].2.contains("checksum"), "{:?}", scan.corrupt);
    assert_eq!(
        scan.records,
        recs.len() as u64 - 1,
        "the records after it are still applied"
    );
    let mut expect = recs.clone();
    expect.remove(3);
    assert!(same(&scan.state, &fold(&expect)));
    // A damaged file magic is reported too.
    let mut b2 = encode(&recs);
    b2[0] = b'X';
    assert!(!journal::scan_bytes(&b2).corrupt.is_empty());
}

// ---- the full cycle on a real core ---------------------------------------

const SHIFT: u32 = 12;

/// The services a test pumps: the completions and the stash.
struct Svc {
    rx: mpsc::Receiver<Done>,
    stash: crate::stash::Stash,
}

fn journal_on(fx: &mut Fixture) -> Svc {
    journal_on_with(fx, 0)
}

/// A journal whose records may carry up to `inline_max` bytes of pages.
fn journal_on_with(fx: &mut Fixture, inline_max: u64) -> Svc {
    let core = &mut fx.core;
    let path = fx.dir.path().join("tier").join(journal::JOURNAL_NAME);
    let scan = journal::read(&path).unwrap();
    let nonvolatile = core.tiers.tiers.iter().map(|t| !t.volatile).collect();
    core.journal = Some(Journal::new(path, nonvolatile, Default::default()));
    core.meta.touched.on = true;
    let report = crate::jreplay::replay(core, &scan);
    core.journal.as_mut().unwrap().report = report;
    core.journal.as_mut().unwrap().inline_max_bytes = inline_max;
    let (tx, rx) = mpsc::channel();
    let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(|| {});
    let settings = journal::WriterSettings {
        sync_interval: std::time::Duration::from_millis(5),
        compact_min_bytes: 1 << 20,
    };
    Journal::start(core, settings, wake.clone()).unwrap();
    let stash = crate::stash::start(core, crate::report(tx, wake, Done::Stash)).unwrap();
    Svc { rx, stash }
}

/// Runs poller rounds until every batch written so far is durable.
fn journal_settle(core: &mut Core, svc: &mut Svc) {
    let seq = journal_seqs(core).0;
    pump(core, svc, |c| journal_seqs(c).1 > seq);
}

/// Runs poller rounds until `done` (bounded).
fn pump(core: &mut Core, svc: &mut Svc, mut done: impl FnMut(&mut Core) -> bool) {
    for _ in 0..20_000 {
        crate::stash::tick(core, &mut svc.stash);
        Journal::round(core);
        while let Ok(m) = svc.rx.try_recv() {
            if let Done::Stash(d) = m {
                crate::stash::complete(core, &mut svc.stash, *d);
            }
        }
        Journal::round(core);
        if done(core) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    panic!("condition not reached");
}

fn create(core: &mut Core, path: &str, persist: u32) -> strata_meta::BucketId {
    let a = OpenArgs {
        create: true,
        mode: 0o640,
        persist: strata_meta::Persist::from_u32(persist).unwrap(),
        page_shift: SHIFT,
        dest: Some(DestInfo::default()),
        ..OpenArgs::default()
    };
    core.file_open(path, &a).unwrap()
}

fn read_file(core: &mut Core, path: &str) -> Vec<u8> {
    let id = core.meta.file_by_path(path).expect("file restored");
    let size = core.meta.file(id).unwrap().size;
    let mut out = vec![0u8; size as usize];
    let mut ex = Vec::new();
    let (_, covered, pin) = core.file_read((1, 0), id, 0, size, &mut ex, 4096).unwrap();
    assert_eq!(covered, size);
    for e in &ex {
        let d = &mut out[e.logical_off as usize..(e.logical_off + e.len) as usize];
        if e.tier == strata_proto::types::TIER_HOLE {
            d.fill(0);
        } else {
            core.tiers.read(e.tier as usize, e.phys_off, d).unwrap();
        }
    }
    core.unpin((1, 0), pin);
    out
}

#[test]
fn fsync_stashes_ram_pages_and_a_restarted_core_gets_them_back() {
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let data = pattern(10_000, 3);
    let id = create(core, "/dest/ckpt", Persist::Default as u32);
    core.file_write(id, Some(0), Src::Bytes(&data), None)
        .unwrap();
    // The pages are in RAM: volatile.
    let page0 = core.meta.page_blob(id, 0).unwrap();
    assert_eq!(core.meta.blob(page0).unwrap().extents[0].tier, 0);
    let target = core.file_sync(id).unwrap();
    assert!(target > 0);
    pump(core, &mut rx, |c| {
        c.file_sync_state(id, target).unwrap().done
    });
    // Now on the dir tier, sealed, still dirty (the destination never saw it).
    let b = core.meta.blob(page0).unwrap();
    assert!(b.extents.iter().all(|e| e.tier == 1) && b.sealed_crc.is_some() && b.dirty);
    // Another file that was never fsync'ed and lives in RAM is lost at a crash.
    let other = create(core, "/dest/unsynced", Persist::Default as u32);
    core.file_write(other, Some(0), Src::Bytes(&data[..100]), None)
        .unwrap();
    // A SCRATCH file on the dir tier is not journaled either.
    let dir = fx.crash();

    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let rep = core.journal.as_ref().unwrap().report.clone();
    assert_eq!(
        (
            rep.files,
            rep.dirty_files,
            rep.corrupt_ranges,
            rep.dropped_blobs,
            rep.crc_mismatches
        ),
        (1, 1, 0, 0, 0),
        "{rep:?}"
    );
    assert_eq!(read_file(core, "/dest/ckpt"), data);
    let id = core.meta.file_by_path("/dest/ckpt").unwrap();
    let rec = core.meta.file(id).unwrap();
    assert_eq!(rec.dirty_pages.len(), 3);
    assert!(
        rec.needs_flush() && core.files.dirty.contains(&id),
        "the flusher resumes it"
    );
    assert!(core.meta.file_by_path("/dest/unsynced").is_none());
    core.check().unwrap();
    core.file_check().unwrap();
}

/// `journal.inline_max`: an fsync'ed DEFAULT page stays in RAM and its
/// journal record carries its bytes (one journal write and fdatasync). An
/// unchanged page is not copied again by the next fsync; a renamed file's
/// records move with it; a restarted core places the bytes on the tier.
#[test]
fn an_inline_fsync_keeps_pages_in_ram_and_a_restarted_core_gets_them_back() {
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut rx = journal_on_with(&mut fx, 1 << 20);
    let core = &mut fx.core;
    let mut data = pattern(10_000, 3);
    let id = create(core, "/dest/ckpt", Persist::Default as u32);
    core.file_write(id, Some(0), Src::Bytes(&data), None)
        .unwrap();
    let target = core.file_sync(id).unwrap();
    pump(core, &mut rx, |c| {
        c.file_sync_state(id, target).unwrap().done
    });
    let page0 = core.meta.page_blob(id, 0).unwrap();
    let b = core.meta.blob(page0).unwrap();
    assert!(
        b.extents.iter().all(|e| e.tier == 0) && b.sealed_crc.is_some() && b.dirty,
        "still in RAM, sealed, dirty: {b:?}"
    );
    let st = core.journal.as_ref().unwrap().status();
    assert_eq!((st.inline_bytes, st.inline_pages), (10_000, 3), "{st:?}");
    assert_eq!(rx.stash.stashed_bytes_total, 10_000);
    assert_eq!(core.tiers.tiers[1].blob_bytes, 0, "nothing on the tier");
    // One byte of the last page changes: the next fsync copies that page only.
    data[9_000] ^= 0xff;
    core.file_write(id, Some(9_000), Src::Bytes(&data[9_000..9_001]), None)
        .unwrap();
    let target = core.file_sync(id).unwrap();
    pump(core, &mut rx, |c| {
        c.file_sync_state(id, target).unwrap().done
    });
    assert_eq!(rx.stash.stashed_bytes_total, 10_000 + (10_000 - 8192));
    let st = core.journal.as_ref().unwrap().status();
    assert_eq!(
        st.inline_bytes, 10_000,
        "the old image is superseded: {st:?}"
    );
    // Renamed after its fsync: the records (and their bytes) follow.
    assert!(core.file_rename("/dest/ckpt", "/dest/final", true).unwrap());
    journal_settle(core, &mut rx);
    assert_eq!(core.journal.as_ref().unwrap().status().inline_bytes, 10_000);
    let dir = fx.crash();

    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let rep = core.journal.as_ref().unwrap().report.clone();
    assert_eq!(
        (
            rep.files,
            rep.dirty_files,
            rep.corrupt_ranges,
            rep.dropped_blobs,
            rep.crc_mismatches
        ),
        (1, 1, 0, 0, 0),
        "{rep:?}"
    );
    assert!(core.meta.file_by_path("/dest/ckpt").is_none());
    assert_eq!(read_file(core, "/dest/final"), data);
    let id = core.meta.file_by_path("/dest/final").unwrap();
    for p in 0..3 {
        let b = core.meta.blob(core.meta.page_blob(id, p).unwrap()).unwrap();
        assert!(
            b.extents.iter().all(|e| e.tier == 1) && b.sealed_crc.is_some() && b.dirty,
            "page {p} placed on the dir tier: {b:?}"
        );
    }
    // The rewritten journal points at the tier: a second crash loses nothing.
    let st = core.journal.as_ref().unwrap().status();
    assert_eq!(st.inline_bytes, 0, "{st:?}");
    let dir = fx.crash();
    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    assert_eq!(read_file(&mut fx.core, "/dest/final"), data);
    fx.core.check().unwrap();
    fx.core.file_check().unwrap();
}

/// Replay places the bytes of inline records only after every record
/// pointing at tier space reserved it: a file replayed first (by name)
/// whose bytes were inline must not take the space of one replayed later
/// (found by scripts/kill9.sh: "overlaps restored data; not restored").
#[test]
fn replay_places_inline_bytes_after_the_tier_records_reserve_their_space() {
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut rx = journal_on_with(&mut fx, 1 << 20);
    let core = &mut fx.core;
    // More than one stash job may carry inline: this one goes to the tier.
    let big = pattern((crate::stash::INLINE_JOB_BYTES_MAX + 8192) as usize, 1);
    let b = create(core, "/dest/b", Persist::Default as u32);
    core.file_write(b, Some(0), Src::Bytes(&big), None).unwrap();
    let t = core.file_sync(b).unwrap();
    pump(core, &mut rx, |c| c.file_sync_state(b, t).unwrap().done);
    let small = pattern(5000, 2);
    let a = create(core, "/dest/a", Persist::Default as u32);
    core.file_write(a, Some(0), Src::Bytes(&small), None)
        .unwrap();
    let t = core.file_sync(a).unwrap();
    pump(core, &mut rx, |c| c.file_sync_state(a, t).unwrap().done);
    let pb = core.meta.blob(core.meta.page_blob(b, 0).unwrap()).unwrap();
    let pa = core.meta.blob(core.meta.page_blob(a, 0).unwrap()).unwrap();
    assert!(
        pb.extents.iter().all(|e| e.tier == 1),
        "b on the tier: {pb:?}"
    );
    assert!(pa.extents.iter().all(|e| e.tier == 0), "a inline: {pa:?}");
    let dir = fx.crash();
    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let rep = core.journal.as_ref().unwrap().report.clone();
    assert_eq!((rep.files, rep.dropped_blobs), (2, 0), "{rep:?}");
    assert_eq!(read_file(core, "/dest/a"), small);
    assert_eq!(read_file(core, "/dest/b"), big);
    core.check().unwrap();
    core.file_check().unwrap();
}

/// Small appends with an fsync after each copy only their new bytes to the
/// tier: the page's bytes already there stay (the stash copied the whole
/// page every time: O(n²) bytes for a log), and a crash brings back the
/// page whole.
#[test]
fn fsyncs_after_small_appends_copy_only_the_new_bytes() {
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let a = OpenArgs {
        create: true,
        mode: 0o640,
        persist: Persist::Default,
        page_shift: 16,
        dest: Some(DestInfo::default()),
        ..OpenArgs::default()
    };
    let id = core.file_open("/dest/log", &a).unwrap();
    let data = pattern(20 * 4096, 6);
    for i in 0..20 {
        let piece = &data[i * 4096..(i + 1) * 4096];
        crate::testutil::via_lease(core, piece, |core, src, taken| {
            core.file_write(id, Some((i * 4096) as u64), src, taken)
                .unwrap()
        });
        let t = core.file_sync(id).unwrap();
        pump(core, &mut rx, |c| c.file_sync_state(id, t).unwrap().done);
    }
    // Each byte about once (a blob whose extents grow too many has them
    // merged into a fresh RAM extent, copied again); the whole page each
    // time was 10.5x the data.
    let copied = rx.stash.stashed_bytes_total;
    assert!(
        copied >= data.len() as u64 && copied <= 2 * data.len() as u64,
        "{copied} bytes copied for {}",
        data.len()
    );
    let page0 = core.meta.page_blob(id, 0).unwrap();
    let b = core.meta.blob(page0).unwrap();
    assert!(
        b.extents.iter().all(|e| e.tier == 1) && b.sealed_crc.is_some(),
        "{b:?}"
    );
    let dir = fx.crash();
    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    let rep = fx.core.journal.as_ref().unwrap().report.clone();
    assert_eq!((rep.dropped_blobs, rep.crc_mismatches), (0, 0), "{rep:?}");
    assert_eq!(read_file(&mut fx.core, "/dest/log"), data);
    fx.core.check().unwrap();
    fx.core.file_check().unwrap();
}

/// Beyond `journal.inline_max` the fsync copies the pages to the tier.
#[test]
fn an_fsync_beyond_the_inline_limit_copies_to_the_tier() {
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut rx = journal_on_with(&mut fx, 4096);
    let core = &mut fx.core;
    let data = pattern(10_000, 9);
    let id = create(core, "/dest/big", Persist::Default as u32);
    core.file_write(id, Some(0), Src::Bytes(&data), None)
        .unwrap();
    let target = core.file_sync(id).unwrap();
    pump(core, &mut rx, |c| {
        c.file_sync_state(id, target).unwrap().done
    });
    let b = core.meta.blob(core.meta.page_blob(id, 0).unwrap()).unwrap();
    assert!(b.extents.iter().all(|e| e.tier == 1), "{b:?}");
    assert_eq!(core.journal.as_ref().unwrap().status().inline_bytes, 0);
    let dir = fx.crash();
    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    assert_eq!(read_file(&mut fx.core, "/dest/big"), data);
}

/// A file with more dirty pages in RAM than one stash job copies is stashed
/// in a few jobs: the pages a first job already stashed (still dirty: the
/// destination never saw them) do not fill the next job's quota.
#[test]
fn an_fsync_of_more_pages_than_one_stash_job_takes_few_jobs() {
    let pages = 2 * crate::stash::STASH_PAGES_MAX + 100;
    let bytes = (pages as u64) << SHIFT;
    let mut fx = fixture(bytes + (8 << 20), 2 * bytes + (8 << 20), 1 << 20);
    let mut rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let data = pattern(bytes as usize, 5);
    let id = create(core, "/dest/big", Persist::Default as u32);
    core.file_write(id, Some(0), Src::Bytes(&data), None)
        .unwrap();
    let target = core.file_sync(id).unwrap();
    assert!(target > 0);
    pump(core, &mut rx, |c| {
        c.file_sync_state(id, target).unwrap().done
    });
    let s = &rx.stash;
    assert!(s.jobs_total <= 3, "{} stash jobs", s.jobs_total);
    assert_eq!(s.fallbacks_total, 0);
    assert_eq!(s.stashed_bytes_total, bytes);
    let rec = core.meta.file(id).unwrap();
    assert_eq!(rec.dirty_pages.len(), pages);
    for p in [0, pages as u64 / 2, pages as u64 - 1] {
        let b = core.meta.blob(core.meta.page_blob(id, p).unwrap()).unwrap();
        assert!(
            b.extents.iter().all(|e| e.tier == 1),
            "page {p} on the dir tier"
        );
    }
    core.check().unwrap();
}

#[test]
fn native_blobs_on_the_dir_tier_survive_and_ram_blobs_do_not() {
    // A RAM tier too small for the big blob: it goes to the dir tier.
    let mut fx = fixture(64 << 10, 64 << 20, 1 << 20);
    let mut rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let (b, _) = core.meta.bucket_open("data", true, false, 0).unwrap();
    let big = pattern(1 << 20, 9);
    core.put(b, "big", Src::Bytes(&big), None, None, false)
        .unwrap();
    core.put(b, "small", Src::Bytes(b"tiny"), None, None, false)
        .unwrap();
    core.put(b, "gone", Src::Bytes(&big[..200_000]), None, None, false)
        .unwrap();
    core.delete(b, "gone").unwrap();
    let big_tier = core
        .meta
        .blob(core.meta.blob_lookup(b, "big").unwrap())
        .unwrap()
        .extents[0]
        .tier;
    assert_eq!(big_tier, 1, "the big blob is on the dir tier");
    journal_settle(core, &mut rx);
    let dir = fx.crash();

    let mut fx = fixture_in(dir, 64 << 10, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let b = core.meta.bucket_by_name("data").expect("bucket restored");
    let id = core.meta.blob_lookup(b, "big").expect("big restored");
    let blob = core.meta.blob(id).unwrap().clone();
    let mut got = vec![0u8; blob.size as usize];
    for e in &blob.extents {
        core.tiers
            .read(
                e.tier as usize,
                e.phys_off,
                &mut got[e.logical_off as usize..e.end() as usize],
            )
            .unwrap();
    }
    assert_eq!(got, big);
    assert!(core.meta.blob_lookup(b, "gone").is_err());
    assert!(
        core.meta.blob_lookup(b, "small").is_err(),
        "RAM blobs are volatile"
    );
    core.check().unwrap();
}

#[test]
fn the_writer_compacts_to_the_live_records_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::JOURNAL_NAME);
    let shared = Arc::new(journal::Shared::default());
    let settings = journal::WriterSettings {
        sync_interval: std::time::Duration::from_millis(1),
        compact_min_bytes: 64 << 10,
    };
    let w = journal::Writer::create(
        &path,
        State::default(),
        settings,
        shared.clone(),
        Arc::new(|| {}),
    )
    .unwrap();
    let mut h = journal::Handle::start(w).unwrap();
    let mut expect = State::default();
    // 2000 batches rewriting 10 blobs: the live state is small, the log is not.
    for seq in 1..=2000u64 {
        let mut recs = vec![Record::BucketSet {
            name: "b".into(),
            tags: vec![],
            file: None,
        }];
        let k = seq % 10;
        recs.push(Record::BlobSet {
            bucket: "b".into(),
            name: format!("k{k}"),
            size: seq,
            dirty: false,
            crc: None,
            extents: vec![Extent {
                logical_off: 0,
                len: seq,
                tier: 1,
                phys_off: seq * 4096,
            }],
        });
        if seq % 7 == 0 {
            recs.push(Record::BlobDrop {
                bucket: "b".into(),
                name: format!("k{}", (k + 1) % 10),
            });
        }
        for r in &recs {
            expect.apply(r.clone());
        }
        h.tx.send(journal::Msg::Batch { seq, records: recs })
            .unwrap();
    }
    h.stop();
    assert!(
        shared.compactions.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "compacted at least once"
    );
    assert_eq!(
        shared.synced_seq.load(std::sync::atomic::Ordering::SeqCst),
        2000
    );
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len < 200 << 10, "journal stays small: {len} bytes");
    let scan = journal::read(&path).unwrap();
    assert!(scan.corrupt.is_empty() && scan.torn_tail_bytes == 0);
    assert!(
        same(&scan.state, &expect),
        "replay after compaction equals the fold of everything written"
    );
}

#[test]
fn a_page_rewritten_in_ram_after_fsync_comes_back_as_its_fsynced_version() {
    rewritten_after_fsync(0);
}

/// The same with the fsync'ed version inside the journal, not on the tier.
#[test]
fn a_page_rewritten_after_an_inline_fsync_comes_back_as_its_fsynced_version() {
    rewritten_after_fsync(64 << 20);
}

fn rewritten_after_fsync(inline_max: u64) {
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut rx = journal_on_with(&mut fx, inline_max);
    let core = &mut fx.core;
    let v1 = pattern(8192, 1);
    let id = create(core, "/dest/f", Persist::Default as u32);
    core.file_write(id, Some(0), Src::Bytes(&v1), None).unwrap();
    let target = core.file_sync(id).unwrap();
    pump(core, &mut rx, |c| {
        c.file_sync_state(id, target).unwrap().done
    });
    // Rewrite both pages (the new version lands in RAM) and extend the file,
    // without fsync; let the journal see it all.
    let v2 = pattern(8192 + 4096, 2);
    crate::testutil::via_lease(core, &v2, |core, src, taken| {
        core.file_write(id, Some(0), src, taken).unwrap()
    });
    assert!(
        core.meta
            .blob(core.meta.page_blob(id, 0).unwrap())
            .unwrap()
            .extents
            .iter()
            .any(|e| e.tier == 0),
        "v2 is in RAM"
    );
    journal_settle(core, &mut rx);
    let dir = fx.crash();

    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let rep = core.journal.as_ref().unwrap().report.clone();
    assert_eq!(
        (rep.corrupt_ranges, rep.dropped_blobs, rep.crc_mismatches),
        (0, 0, 0),
        "{rep:?}"
    );
    assert_eq!(
        read_file(core, "/dest/f"),
        v1,
        "the fsync'ed version, not zeros and not the unsynced extension"
    );
    core.check().unwrap();
    core.file_check().unwrap();
}

/// Every regular file under `dir` (recursively) with its bytes.
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out
}

/// Power loss, emulated: everything written after the last acknowledged
/// fsync is dropped — the tier file goes back to its bytes at that moment,
/// the journal to its length then plus a torn fragment of the next record
/// (a partially persisted append) — and the restarted daemon must give back
/// exactly the fsync'ed state.
#[test]
fn a_power_loss_drops_unsynced_state_and_keeps_what_fsync_acknowledged() {
    power_loss(0);
}

/// The same with the fsync'ed pages inside the journal (nothing of them
/// in the tier file until the restart places them there).
#[test]
fn a_power_loss_keeps_what_an_inline_fsync_acknowledged() {
    power_loss(64 << 20);
}

fn power_loss(inline_max: u64) {
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut rx = journal_on_with(&mut fx, inline_max);
    let core = &mut fx.core;
    let v1 = pattern(3 * 4096 + 100, 7);
    let a = create(core, "/dest/a", Persist::Default as u32);
    core.file_write(a, Some(0), Src::Bytes(&v1), None).unwrap();
    let empty = create(core, "/dest/empty", Persist::Default as u32);
    let target = core.file_sync(a).unwrap();
    let target_e = core.file_sync(empty).unwrap();
    pump(core, &mut rx, |c| {
        c.file_sync_state(a, target).unwrap().done
            && c.file_sync_state(empty, target_e).unwrap().done
    });
    let at_sync = snapshot(fx.dir.path());
    let journal_path = fx.dir.path().join("tier").join(journal::JOURNAL_NAME);
    let journal_len = at_sync
        .iter()
        .find(|(p, _)| *p == journal_path)
        .expect("journal file")
        .1
        .len();

    // Work after that moment — in the emulated timeline the power fails
    // before any of it completes: a rewrite of A and a new file B, stashed
    // to the dir tier so that the tier file and the journal grow.
    let core = &mut fx.core;
    let v2 = pattern(2 * 4096, 8);
    core.file_write(a, Some(0), Src::Bytes(&v2), None).unwrap();
    let b = create(core, "/dest/b", Persist::Default as u32);
    core.file_write(b, Some(0), Src::Bytes(&v2), None).unwrap();
    let (ta, tb) = (core.file_sync(a).unwrap(), core.file_sync(b).unwrap());
    pump(core, &mut rx, |c| {
        c.file_sync_state(a, ta).unwrap().done && c.file_sync_state(b, tb).unwrap().done
    });
    let grown = std::fs::read(&journal_path).unwrap();
    assert!(
        grown.len() > journal_len + 7,
        "the journal grew after the fsync"
    );
    let dir = fx.crash();

    // The power loss: back to the synced bytes, plus 7 bytes of the next frame
    // (the journal only appends, so the synced journal is a prefix of it).
    assert_eq!(
        &grown[..journal_len],
        &at_sync.iter().find(|(p, _)| *p == journal_path).unwrap().1[..]
    );
    for (p, _) in snapshot(dir.path()) {
        if !at_sync.iter().any(|(q, _)| *q == p) {
            std::fs::remove_file(&p).unwrap();
        }
    }
    for (p, bytes) in &at_sync {
        let mut bytes = bytes.clone();
        if *p == journal_path {
            bytes.extend_from_slice(&grown[journal_len..journal_len + 7]);
        }
        std::fs::write(p, &bytes).unwrap();
    }

    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _rx = journal_on(&mut fx);
    let core = &mut fx.core;
    let rep = core.journal.as_ref().unwrap().report.clone();
    assert_eq!(
        (rep.corrupt_ranges, rep.dropped_blobs, rep.crc_mismatches),
        (0, 0, 0),
        "{rep:?}"
    );
    assert!(
        rep.torn_tail_bytes > 0,
        "the torn fragment is seen and ignored: {rep:?}"
    );
    assert_eq!(read_file(core, "/dest/a"), v1, "the fsync'ed version of A");
    assert_eq!(
        read_file(core, "/dest/empty"),
        Vec::<u8>::new(),
        "the fsync'ed empty file"
    );
    assert!(
        core.meta.file_by_path("/dest/b").is_none(),
        "B was never acknowledged"
    );
    core.check().unwrap();
    core.file_check().unwrap();
}

/// An owner's map of the pages other nodes hold (issue 15): a DEFAULT
/// file whose pages node 7 holds, unflushed, comes back after a crash with
/// the same id (node 7 holds them under it), the run at its generation,
/// its size and a place in the flusher's dirty set; a run already at the
/// destination is not journaled; ids issued afterwards are above.
#[test]
fn an_owners_map_of_held_pages_and_the_files_id_survive_a_crash() {
    const PAGE: u64 = 1 << SHIFT;
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut svc = journal_on(&mut fx);
    let jpath = fx.dir.path().join("tier").join(journal::JOURNAL_NAME);
    let core = &mut fx.core;
    // an id below it is freed: a fresh core would give the file id 1
    let gone = create(core, "/dest/gone", Persist::Default as u32);
    core.file_unlink("/dest/gone").unwrap();
    let id = create(core, "/dest/held", Persist::Default as u32);
    assert!(id.0 > gone.0);
    core.file_write(id, Some(0), Src::Bytes(b"owner's head"), None)
        .unwrap();
    let gen = core.file_publish(id, 7, 1, 3, 4 * PAGE).unwrap();
    let flushed = core.file_publish(id, 8, 4, 1, 5 * PAGE).unwrap();
    core.files
        .page_maps
        .get_mut(&id)
        .unwrap()
        .mark_flushed(8, 4, 4, flushed);
    core.file_changed(id, false);
    let want = vec![journal::HeldRun {
        holder: 7,
        first: 1,
        last: 3,
        gen,
    }];
    let journaled = |want: &Vec<journal::HeldRun>| {
        journal::read(&jpath).ok().is_some_and(|s| {
            matches!(s.state.buckets.get("/dest/held"),
                Some(Record::BucketSet { file: Some(f), .. }) if &f.held == want)
        })
    };
    pump(core, &mut svc, |_| journaled(&want));
    let dir = fx.crash();

    let mut fx = fixture_in(dir, 4 << 20, 64 << 20, 1 << 20);
    let _svc = journal_on(&mut fx);
    let core = &mut fx.core;
    let rep = core.journal.as_ref().unwrap().report.clone();
    assert_eq!(
        (rep.files, rep.held_runs, rep.dropped_blobs),
        (1, 1, 0),
        "{rep:?}"
    );
    let back = core.meta.file_by_path("/dest/held").expect("restored");
    assert_eq!(back, id, "the file keeps its id");
    let runs: Vec<_> = core.files.page_maps[&id].runs().copied().collect();
    assert_eq!(
        runs,
        vec![strata_meta::pagemap::Run {
            first: 1,
            last: 3,
            holder: 7,
            gen,
            flushed: false
        }]
    );
    assert!(core.file_remote_unflushed(id));
    let rec = core.meta.file(id).unwrap();
    // the owner's head page was in RAM (lost); the held pages set the size
    assert!(rec.size >= 4 * PAGE, "{}", rec.size);
    assert!(rec.needs_flush() && core.files.dirty.contains(&id));
    let later = create(core, "/dest/later", Persist::Default as u32);
    assert!(later.0 > id.0);
    core.check().unwrap();
    core.file_check().unwrap();
}

/// Pages where written: an fsync of a file other nodes hold pages of is
/// durable once each holder journaled its pages (the daemon asks them,
/// `held_sync_wanted` → `held_sync_done`) and this node journaled its own
/// pages and its map of theirs — not before; a holder that cannot makes
/// the fsync wait for the destination. Without a cluster side to ask, the
/// destination it is.
#[test]
fn an_fsync_of_held_pages_is_durable_in_the_holders_and_the_owners_journals() {
    const PAGE: u64 = 1 << SHIFT;
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let mut svc = journal_on(&mut fx);
    let jpath = fx.dir.path().join("tier").join(journal::JOURNAL_NAME);
    let core = &mut fx.core;
    core.files.held_sync_on = true;
    let id = create(core, "/dest/held", Persist::Default as u32);
    core.file_write(id, Some(0), Src::Bytes(b"owner's head"), None)
        .unwrap();
    let g7 = core.file_publish(id, 7, 1, 3, 4 * PAGE).unwrap();
    let g8 = core.file_publish(id, 8, 4, 1, 5 * PAGE).unwrap();
    core.file_changed(id, false);
    let target = core.file_sync(id).unwrap();
    assert!(target > 0);
    let wants = core.take_held_sync_wanted();
    assert_eq!(
        wants,
        vec![crate::state::HeldSyncWant {
            file: id,
            holders: vec![7, 8],
            target
        }]
    );
    // asked once per generation
    assert_eq!(core.file_sync(id).unwrap(), target);
    assert!(core.take_held_sync_wanted().is_empty());
    // The owner's part: its page stashed, its record and map journaled.
    pump(core, &mut svc, |c| {
        c.journal.as_ref().unwrap().jsynced(id) >= target
    });
    let want = vec![
        journal::HeldRun {
            holder: 7,
            first: 1,
            last: 3,
            gen: g7,
        },
        journal::HeldRun {
            holder: 8,
            first: 4,
            last: 4,
            gen: g8,
        },
    ];
    let s = journal::read(&jpath).unwrap();
    assert!(
        matches!(s.state.buckets.get("/dest/held"),
            Some(Record::BucketSet { file: Some(f), .. }) if f.held == want),
        "the map is journaled"
    );
    let head = core.meta.blob(core.meta.page_blob(id, 0).unwrap()).unwrap();
    assert!(
        head.extents.iter().all(|e| e.tier == 1),
        "the owner's page stashed"
    );
    assert!(
        !core.file_sync_state(id, target).unwrap().done,
        "not durable before the holders answered"
    );
    core.held_sync_done(id, target, Ok(()));
    assert!(core.file_sync_state(id, target).unwrap().done);
    assert_eq!(core.file_sync(id).unwrap(), 0, "nothing left to sync");
    assert!(
        !core.meta.file(id).unwrap().urgent,
        "the destination was not needed"
    );

    // A holder that cannot journal: the fsync waits for the destination.
    core.file_write(id, Some(0), Src::Bytes(b"OWNER'S HEAD"), None)
        .unwrap();
    core.file_changed(id, false);
    let t2 = core.file_sync(id).unwrap();
    assert!(t2 > target);
    assert_eq!(core.take_held_sync_wanted().len(), 1);
    core.held_sync_done(id, t2, Err("node 8 has no journal".into()));
    pump(core, &mut svc, |c| {
        c.journal.as_ref().unwrap().jsynced(id) >= t2
    });
    let rec = core.meta.file(id).unwrap();
    assert!(rec.urgent && rec.durable && core.files.dirty.contains(&id));
    assert!(
        !core.file_sync_state(id, t2).unwrap().done,
        "waits for the destination"
    );

    // No cluster side to ask: the destination, at once.
    core.files.held_sync_on = false;
    core.file_write(id, Some(0), Src::Bytes(b"third"), None)
        .unwrap();
    core.file_changed(id, false);
    let t3 = core.file_sync(id).unwrap();
    assert!(t3 > t2);
    assert!(core.take_held_sync_wanted().is_empty());
    assert!(!core.file_sync_state(id, t3).unwrap().done);
    core.check().unwrap();
    core.file_check().unwrap();
}

/// A holder's side of a held sync: its pages of the file (its shadow, a
/// WORKFLOW record) are journaled on its dir tier; a SCRATCH shadow, a
/// missing one or a node without a journal cannot.
#[test]
fn a_holder_journals_its_pages_of_a_file_when_the_owner_asks() {
    let file = (1u64 << strata_meta::NODE_SHIFT) | 5;
    let mut fx = fixture(4 << 20, 64 << 20, 1 << 20);
    let core = &mut fx.core;
    let shadow = create(
        core,
        &crate::files_publish::shadow_path(file),
        Persist::Workflow as u32,
    );
    assert_eq!(
        core.shadow_sync(file).unwrap_err(),
        strata_proto::Errno::NotDurable,
        "no journal"
    );
    let mut svc = journal_on(&mut fx);
    let core = &mut fx.core;
    let data = pattern(3 * 4096 + 100, 4);
    core.file_write(shadow, Some(0), Src::Bytes(&data), None)
        .unwrap();
    let (id, target) = core.shadow_sync(file).unwrap();
    assert_eq!(id, shadow);
    assert!(target > 0);
    pump(core, &mut svc, |c| {
        c.file_sync_state(id, target).unwrap().done
    });
    let b = core.meta.blob(core.meta.page_blob(id, 0).unwrap()).unwrap();
    assert!(b.extents.iter().all(|e| e.tier == 1), "on the dir tier");
    assert_eq!(
        core.shadow_sync(file).unwrap(),
        (id, 0),
        "already journaled"
    );
    assert_eq!(
        core.shadow_sync(file + 1).unwrap_err(),
        strata_proto::Errno::NoFile
    );
    let scratch = file + 2;
    create(
        core,
        &crate::files_publish::shadow_path(scratch),
        Persist::Scratch as u32,
    );
    assert_eq!(
        core.shadow_sync(scratch).unwrap_err(),
        strata_proto::Errno::NotDurable
    );
}
