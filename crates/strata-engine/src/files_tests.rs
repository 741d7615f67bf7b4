//! Unit tests of the file model (`files.rs`) on a real `Core`.

use strata_meta::BucketId;
use strata_proto::types::{DestInfo, ReadExtent, TIER_DEST, TIER_HOLE};
use strata_proto::Errno;

use crate::core::{Core, Src};
use crate::files::{OpenArgs, WriteOutcome};
use crate::testutil::{fixture, pattern, via_lease};

const PAGE: u64 = 4096;
const SHIFT: u32 = 12;
const OWNER: (u64, u32) = (1, 0);

fn create(core: &mut Core, path: &str, persist: u32) -> BucketId {
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

fn open_from_dest(core: &mut Core, path: &str, size: u64) -> BucketId {
    let dest = DestInfo {
        exists: true,
        mode: 0o600,
        size,
        ..DestInfo::default()
    };
    let a = OpenArgs {
        page_shift: SHIFT,
        dest: Some(dest),
        ..OpenArgs::default()
    };
    core.file_open(path, &a).unwrap()
}

fn write(core: &mut Core, id: BucketId, off: u64, data: &[u8]) -> WriteOutcome {
    core.file_write(id, Some(off), Src::Bytes(data), None)
        .unwrap()
}

fn write_lease(core: &mut Core, id: BucketId, off: Option<u64>, data: &[u8]) -> WriteOutcome {
    via_lease(core, data, |core, src, taken| {
        core.file_write(id, off, src, taken).unwrap()
    })
}

/// Reads the whole file; `dest` supplies TIER_DEST bytes.
fn read_all(core: &mut Core, id: BucketId, dest: &[u8]) -> (Vec<u8>, Vec<ReadExtent>) {
    let size = core.meta.file(id).unwrap().size;
    let mut out = vec![0xEEu8; size as usize];
    let mut all = Vec::new();
    let mut at = 0u64;
    // Bounded: each round covers ≥ 1 byte.
    for _ in 0..=size {
        if at >= size {
            break;
        }
        let mut ex = Vec::new();
        let (sz, covered, pin) = core
            .file_read(OWNER, id, at, size - at, &mut ex, 16)
            .unwrap();
        assert_eq!(sz, size);
        assert!(covered > 0);
        let mut expect = at;
        for e in &ex {
            assert_eq!(e.logical_off, expect, "extents are contiguous");
            expect += e.len;
            let d = &mut out[e.logical_off as usize..(e.logical_off + e.len) as usize];
            match e.tier {
                TIER_HOLE => d.fill(0),
                TIER_DEST => d.copy_from_slice(
                    &dest[e.logical_off as usize..(e.logical_off + e.len) as usize],
                ),
                t => core.tiers.read(t as usize, e.phys_off, d).unwrap(),
            }
        }
        assert_eq!(expect, at + covered);
        core.unpin(OWNER, pin);
        all.extend(ex);
        at += covered;
    }
    (out, all)
}

fn check(core: &Core) {
    core.check().unwrap();
    core.file_check().unwrap();
}

#[test]
fn writes_split_across_pages_and_adopt_whole_pages() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let id = create(core, "/d/a", 0);
    let mut model = vec![0u8; 0];
    // Unaligned write spanning 4 pages: partial, whole, whole, partial.
    let data = pattern(3 * PAGE as usize + 100, 1);
    let off = PAGE / 2;
    assert_eq!(
        write_lease(core, id, Some(off), &data),
        WriteOutcome::Done {
            at: off,
            size: off + data.len() as u64
        }
    );
    model.resize((off as usize) + data.len(), 0);
    model[off as usize..].copy_from_slice(&data);
    assert_eq!(core.meta.file_pages(id).unwrap().len(), 4);
    // Page-aligned whole pages through the lease are adopted (one extent, no copy).
    let aligned = pattern(2 * PAGE as usize, 2);
    let before = core.tiers.tiers[0].blob_extents;
    write_lease(core, id, Some(8 * PAGE), &aligned);
    assert_eq!(core.tiers.tiers[0].blob_extents, before + 2);
    model.resize(10 * PAGE as usize, 0);
    model[8 * PAGE as usize..].copy_from_slice(&aligned);
    let (got, ex) = read_all(core, id, &[]);
    assert_eq!(got, model);
    assert!(
        ex.iter().any(|e| e.tier == TIER_HOLE),
        "pages 4..8 are a hole"
    );
    let rec = core.meta.file(id).unwrap();
    assert_eq!(rec.size, 10 * PAGE);
    assert_eq!(rec.dirty_pages.len(), 6);
    for (_, b) in core.meta.file_pages(id).unwrap() {
        assert!(core.meta.blob(b).unwrap().size <= PAGE);
    }
    assert_eq!(core.tiers.arena.leased_bytes, 0);
    check(core);
    // Everything goes back to the allocators when the file is unlinked.
    assert!(core.file_unlink("/d/a").unwrap());
    assert_eq!(
        core.tiers.arena.alloc.used_bytes(),
        0,
        "no leaked lease or page bytes"
    );
    assert_eq!(core.meta.blob_count(), 0);
    check(core);
}

#[test]
fn need_fill_is_decided_before_anything_changes() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let dest = pattern(10_000, 9);
    let id = open_from_dest(core, "/d/b", 10_000);
    let gen0 = core.meta.file(id).unwrap().mod_gen;
    assert!(
        !core.meta.file(id).unwrap().needs_flush(),
        "opened from the destination: clean"
    );
    // Partial write into page 0 (overlaps the destination): fill first.
    assert_eq!(
        write(core, id, 100, b"xyz"),
        WriteOutcome::NeedFill { page_off: 0 }
    );
    // A write across pages 0..=2 that needs page 2 filled modifies nothing,
    // not even the fully covered page 1.
    assert_eq!(
        write(core, id, 0, &vec![1u8; 2 * PAGE as usize + 10]),
        WriteOutcome::NeedFill { page_off: 2 * PAGE }
    );
    assert_eq!(core.meta.file_pages(id).unwrap().len(), 0);
    assert_eq!(core.meta.file(id).unwrap().mod_gen, gen0);
    // A whole page inside the destination needs no fill.
    assert!(matches!(
        write(core, id, PAGE, &vec![2u8; PAGE as usize]),
        WriteOutcome::Done { .. }
    ));
    // The last page: covering the whole overlap [8192, 10000) is enough.
    assert!(matches!(
        write(
            core,
            id,
            2 * PAGE,
            &vec![3u8; 10_000 - 2 * PAGE as usize + 50]
        ),
        WriteOutcome::Done { .. }
    ));
    // Fill page 0, then the partial write goes through.
    assert!(via_lease(core, &dest[..PAGE as usize], |c, s, t| c
        .file_fill(id, 0, s, t, crate::files_evict::FillFrom::Read)
        .unwrap()));
    assert!(
        !core
            .file_fill(
                id,
                0,
                Src::Bytes(&dest[..PAGE as usize]),
                None,
                crate::files_evict::FillFrom::Read
            )
            .unwrap(),
        "already present"
    );
    assert_eq!(
        core.file_fill(
            id,
            100,
            Src::Bytes(b"x"),
            None,
            crate::files_evict::FillFrom::Read
        ),
        Err(Errno::Inval),
        "unaligned"
    );
    assert!(matches!(
        write(core, id, 100, b"xyz"),
        WriteOutcome::Done { .. }
    ));
    let mut model = dest.clone();
    model[100..103].copy_from_slice(b"xyz");
    model[PAGE as usize..2 * PAGE as usize].fill(2);
    model.resize(10_050, 3);
    model[2 * PAGE as usize..].fill(3);
    let (got, _) = read_all(core, id, &dest);
    assert_eq!(got, model);
    // A filled page is clean until written; written pages are dirty.
    check(core);
    assert_eq!(
        core.meta
            .file(id)
            .unwrap()
            .dirty_pages
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

#[test]
fn reads_go_to_destination_below_dest_size_and_zeros_above() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let dest = pattern(6000, 4);
    let id = open_from_dest(core, "/d/c", 6000);
    core.file_truncate(id, 3 * PAGE).unwrap();
    let mut ex = Vec::new();
    let (size, covered, pin) = core.file_read(OWNER, id, 0, u64::MAX, &mut ex, 16).unwrap();
    assert_eq!((size, covered, pin), (3 * PAGE, 3 * PAGE, 0));
    assert_eq!(
        ex.len(),
        2,
        "destination run and zero run merge across pages: {ex:?}"
    );
    assert_eq!(
        (ex[0].tier, ex[0].logical_off, ex[0].len),
        (TIER_DEST, 0, 6000)
    );
    assert_eq!(
        (ex[1].tier, ex[1].logical_off, ex[1].len),
        (TIER_HOLE, 6000, 3 * PAGE - 6000)
    );
    let (got, _) = read_all(core, id, &dest);
    let mut model = dest.clone();
    model.resize(3 * PAGE as usize, 0);
    assert_eq!(got, model);
    // Reads past EOF cover nothing.
    ex.clear();
    assert_eq!(
        core.file_read(OWNER, id, 5 * PAGE, 10, &mut ex, 16)
            .unwrap(),
        (3 * PAGE, 0, 0)
    );
    assert!(core.files.counters.read_dest_bytes_total >= 6000);
}

#[test]
fn truncate_then_extend_reads_zeros() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let id = create(core, "/d/t", 0);
    let data = pattern(3 * PAGE as usize, 5);
    write(core, id, 0, &data);
    core.file_truncate(id, 5000).unwrap();
    assert_eq!(core.meta.file_pages(id).unwrap().len(), 2, "page 2 dropped");
    let rec = core.meta.file(id).unwrap();
    assert_eq!((rec.size, rec.trunc_min), (5000, Some(5000)));
    check(core);
    core.file_truncate(id, 12_000).unwrap();
    // Writing beyond the end of the shortened page leaves zeros in between.
    write(core, id, 6000, b"tail");
    let (got, _) = read_all(core, id, &[]);
    let mut model = data[..5000].to_vec();
    model.resize(12_000, 0);
    model[6000..6004].copy_from_slice(b"tail");
    assert_eq!(got, model);
    check(core);
    // Truncating a file from the destination lowers dest_size.
    let id2 = open_from_dest(core, "/d/t2", 20_000);
    core.file_truncate(id2, 7000).unwrap();
    let r = core.meta.file(id2).unwrap();
    assert_eq!((r.size, r.dest_size, r.trunc_min), (7000, 7000, Some(7000)));
    core.file_truncate(id2, 9000).unwrap();
    let (got, _) = read_all(core, id2, &pattern(20_000, 1));
    assert_eq!(&got[..7000], &pattern(20_000, 1)[..7000]);
    assert!(got[7000..].iter().all(|b| *b == 0));
    check(core);
}

#[test]
fn appends_are_atomic_and_contiguous() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let id = create(core, "/d/log", 0);
    let mut model = Vec::new();
    for i in 0..50u8 {
        let rec = pattern(100 + i as usize * 37, i);
        let out = if i % 2 == 0 {
            write_lease(core, id, None, &rec)
        } else {
            core.file_write(id, None, Src::Bytes(&rec), None).unwrap()
        };
        assert_eq!(
            out,
            WriteOutcome::Done {
                at: model.len() as u64,
                size: (model.len() + rec.len()) as u64
            }
        );
        model.extend_from_slice(&rec);
    }
    assert_eq!(read_all(core, id, &[]).0, model);
    check(core);
    // Appending to a file whose last page is only at the destination needs a fill.
    let id2 = open_from_dest(core, "/d/log2", 5000);
    assert_eq!(
        core.file_write(id2, None, Src::Bytes(b"x"), None).unwrap(),
        WriteOutcome::NeedFill { page_off: PAGE }
    );
}

#[test]
fn open_flags_and_errors() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let base = OpenArgs {
        page_shift: SHIFT,
        ..OpenArgs::default()
    };
    assert_eq!(core.file_open("/x", &base), Err(Errno::NeedDest));
    assert_eq!(
        core.file_open(
            "/x",
            &OpenArgs {
                dest: Some(DestInfo::default()),
                ..base
            }
        ),
        Err(Errno::NoFile)
    );
    let dir = DestInfo {
        exists: true,
        mode: 0o040755,
        ..DestInfo::default()
    };
    assert_eq!(
        core.file_open(
            "/x",
            &OpenArgs {
                dest: Some(dir),
                ..base
            }
        ),
        Err(Errno::IsDir)
    );
    assert_eq!(
        core.file_open(
            "rel",
            &OpenArgs {
                create: true,
                dest: Some(DestInfo::default()),
                ..base
            }
        ),
        Err(Errno::Inval)
    );
    let id = create(core, "/x", 0);
    let attr = core.file_attr(id).unwrap();
    assert_eq!(
        (attr.mode, attr.page_bytes, attr.dirty),
        (0o640, PAGE, true),
        "new file: dirty until created at the destination"
    );
    assert_eq!(
        core.file_open(
            "/x",
            &OpenArgs {
                create: true,
                excl: true,
                ..base
            }
        ),
        Err(Errno::Exists)
    );
    assert_eq!(
        core.file_open("/x", &base),
        Ok(id),
        "a record needs no destination info"
    );
    write(core, id, 0, &[1u8; 10_000]);
    assert_eq!(
        core.file_open(
            "/x",
            &OpenArgs {
                trunc: true,
                ..base
            }
        ),
        Ok(id)
    );
    assert_eq!(core.meta.file(id).unwrap().size, 0);
    assert_eq!(core.meta.file_pages(id).unwrap().len(), 0);
    // A destination file opened with TRUNC.
    let d = DestInfo {
        exists: true,
        mode: 0o644,
        size: 999,
        ..DestInfo::default()
    };
    let id2 = core
        .file_open(
            "/y",
            &OpenArgs {
                trunc: true,
                dest: Some(d),
                ..base
            },
        )
        .unwrap();
    let r = core.meta.file(id2).unwrap();
    assert_eq!(
        (r.size, r.dest_size, r.trunc_min, r.dest_exists),
        (0, 0, Some(0), true)
    );
    assert!(r.needs_flush());
    check(core);
}

#[test]
fn rename_and_unlink() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let a = create(core, "/r/a", 0);
    let b = create(core, "/r/b", 0);
    write(core, a, 0, &pattern(5000, 1));
    write(core, b, 0, &pattern(9000, 2));
    let blobs = core.meta.blob_count();
    assert!(
        core.file_rename("/r/a", "/r/b", true).unwrap(),
        "replaces the record at the target"
    );
    assert_eq!(
        core.meta.blob_count(),
        blobs - 3,
        "the replaced record's pages are gone"
    );
    assert_eq!(core.meta.file_by_path("/r/b"), Some(a));
    assert_eq!(core.meta.file_by_path("/r/a"), None);
    assert_eq!(core.file_path(a).unwrap(), "/r/b");
    assert_eq!(core.file_attr(b).err(), Some(Errno::NoFile));
    assert!(!core.file_rename("/r/none", "/r/z", true).unwrap());
    assert_eq!(read_all(core, a, &[]).0, pattern(5000, 1));
    // Moving without the destination: it will be written from scratch.
    let c = open_from_dest(core, "/r/c", 3 * PAGE);
    core.file_fill(
        c,
        0,
        Src::Bytes(&[7u8; PAGE as usize]),
        None,
        crate::files_evict::FillFrom::Read,
    )
    .unwrap();
    assert!(core.meta.file(c).unwrap().dirty_pages.is_empty());
    core.meta.file_mut(c).unwrap().mtime_ns = 1_577_836_800_000_000_000;
    assert!(core.file_rename("/r/c", "/r/d", false).unwrap());
    let r = core.meta.file(c).unwrap();
    // rename(2) moves ctime only: rsync, tar and make compare mtimes
    assert_eq!(
        r.mtime_ns, 1_577_836_800_000_000_000,
        "rename kept the mtime"
    );
    assert!(r.ctime_ns > r.mtime_ns);
    assert!(!r.dest_exists);
    assert_eq!(r.dest_size, 0);
    assert_eq!(
        r.dirty_pages.iter().copied().collect::<Vec<_>>(),
        vec![0],
        "filled page now dirty"
    );
    assert!(core.files.dirty.contains(&c));
    check(core);
    assert!(core.file_unlink("/r/b").unwrap());
    assert!(!core.file_unlink("/r/b").unwrap());
    assert_eq!(core.file_attr(a).err(), Some(Errno::NoFile));
    assert!(!core.files.dirty.contains(&a));
    // A plain (non-file) bucket with content blocks a rename onto it.
    let (p, _) = core.meta.bucket_open("/r/plain", true, false, 0).unwrap();
    core.put(p, "k", Src::Bytes(b"v"), None, None, false)
        .unwrap();
    assert_eq!(
        core.file_rename("/r/d", "/r/plain", true),
        Err(Errno::Exists)
    );
    assert!(!core.file_unlink("/r/plain").unwrap(), "not a file record");
    check(core);
}

#[test]
fn scratch_and_workflow_never_enter_the_flush_set() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let s = create(core, "/s/scratch", 1);
    let w = create(core, "/s/workflow", 2);
    for id in [s, w] {
        write(core, id, 0, &pattern(10_000, 3));
        assert_eq!(core.file_sync(id).unwrap(), 0);
        assert!(core.file_sync_state(id, 5).unwrap().done);
        assert!(!core.files.dirty.contains(&id));
    }
    assert!(core.meta.file(s).unwrap().dirty_pages.is_empty());
    assert!(!core.file_attr(s).unwrap().dirty);
    assert_eq!(
        core.meta.file(w).unwrap().dirty_pages.len(),
        3,
        "workflow pages await stage-out"
    );
    assert!(core.file_attr(w).unwrap().dirty);
    check(core);
}

#[test]
fn destroying_a_file_bucket_removes_the_file() {
    let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
    let core = &mut f.core;
    let id = create(core, "/z/f", 0);
    write(core, id, 0, &pattern(9000, 3));
    assert!(core.files.dirty.contains(&id));
    core.bucket_destroy(id).unwrap();
    assert!(!core.files.dirty.contains(&id));
    assert_eq!(core.meta.file_count(), 0);
    assert_eq!(core.meta.blob_count(), 0);
    check(core);
}

/// Found by the differential tester: a file replaced by rename(2) while a
/// process holds it open stays readable through that descriptor (it read
/// ENOENT), like after unlink(2).
#[test]
fn a_file_replaced_by_rename_stays_readable_by_its_holder() {
    let mut fx = fixture(64 << 20, 0, 0);
    let core = &mut fx.core;
    let c = create(core, "/r/c", 0);
    write(core, c, 0, b"old bytes");
    core.file_hold(c, 7).unwrap();
    let b = create(core, "/r/b", 0);
    write(core, b, 0, b"new");
    assert!(core.file_rename("/r/b", "/r/c", false).unwrap());
    assert_eq!(core.meta.file_by_path("/r/c"), Some(b));
    let (bytes, _) = read_all(core, c, &[]);
    assert_eq!(bytes, b"old bytes");
    core.file_check().unwrap();
    core.file_release(c, 7).unwrap();
    assert!(
        core.meta.file(c).is_err(),
        "the orphan dies with its last holder"
    );
}
