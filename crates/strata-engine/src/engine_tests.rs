//! The engine driven directly through its one entry point,
//! `Engine::execute` (and `Engine::serve`, the transports' call), with no transport in between: no rings, no slots, no
//! client segments — the requests a transport would decode are built here.
//! A new transport is one more caller of this same function.

use strata_proto::msg::{DataRef, FileRef, PutMode, Reply, Request};
use strata_proto::types::{DestInfo, OpenFile, Persist, ReadExtent, Unlinked, TIER_HOLE};
use strata_proto::Errno;

use crate::core::Lease;
use crate::testutil::{fixture, pattern, ArenaName, Fixture};
use crate::{Caller, Engine};

const CALLER: Caller = Caller {
    client: 1,
    channel: 0,
    pid: 1,
    reply_bytes_max: 64 << 10,
};

struct Rig {
    engine: Engine,
    /// The caller's lease, as a transport keeps one per channel.
    lease: Option<Lease>,
    _dir: tempfile::TempDir,
    _arena: ArenaName,
}

fn rig() -> Rig {
    let Fixture { core, dir, arena } = fixture(8 << 20, 32 << 20, 1 << 20);
    Rig {
        engine: Engine::new(core, None),
        lease: None,
        _dir: dir,
        _arena: arena,
    }
}

impl Rig {
    fn run(&mut self, req: &Request) -> Result<Reply<'static>, Errno> {
        self.engine
            .execute(CALLER, &mut self.lease, req)
            .map(Reply::into_owned)
    }

    fn bucket(&mut self, name: &str) -> u64 {
        match self.run(&Request::BucketOpen {
            name,
            create: true,
            excl: false,
        }) {
            Ok(Reply::Bucket { id, .. }) => id,
            other => panic!("bucket open: {other:?}"),
        }
    }

    /// The bytes an extent reply names, read from the tiers as a client
    /// that maps them would; releases the pin.
    /// The file's size and the runs of it other nodes hold, as a read of
    /// its first MiB answers them.
    fn remote_runs(&mut self, id: u64) -> (u64, Vec<strata_proto::types::ReadExtent>) {
        let Ok(Reply::Extents { extents, size, .. }) = self.run(&Request::FileRead {
            file: id,
            offset: 0,
            len: 1 << 20,
        }) else {
            panic!("read failed");
        };
        let remote = extents
            .iter()
            .filter(|e| e.tier == strata_proto::types::TIER_REMOTE)
            .copied()
            .collect();
        (size, remote)
    }

    /// A new SCRATCH file of 4 KiB pages with no destination file: its id.
    fn scratch_file(&mut self, path: &str) -> u64 {
        let open = OpenFile {
            create: true,
            persist: Persist::Scratch,
            mode: 0o644,
            page_shift: 12,
            dest: Some(DestInfo::default()),
            ..OpenFile::default()
        };
        let Ok(Reply::FileOpened { id, .. }) = self.run(&Request::FileOpen { path, open }) else {
            panic!("open of {path} failed");
        };
        id
    }

    fn bytes_of(&mut self, r: Reply<'static>) -> (u64, Vec<u8>) {
        let Reply::Extents {
            size,
            covered,
            pin,
            extents,
        } = r
        else {
            panic!("not an extent reply: {r:?}");
        };
        let base = extents.first().map_or(0, |e| e.logical_off);
        let mut out = vec![0u8; covered as usize];
        for e in extents.iter() {
            let at = (e.logical_off - base) as usize;
            let dst = &mut out[at..at + e.len as usize];
            if e.tier == TIER_HOLE {
                dst.fill(0);
            } else {
                self.engine
                    .core
                    .tiers
                    .read(e.tier as usize, e.phys_off, dst)
                    .expect("tier read");
            }
        }
        if pin != 0 {
            assert!(self.engine.core.unpin((CALLER.client, CALLER.channel), pin));
        }
        (size, out)
    }
}

#[test]
fn inline_put_then_get_returns_the_bytes() {
    let mut r = rig();
    let b = r.bucket("b");
    let data = pattern(100_000, 3);
    let put = Request::Put {
        bucket: b,
        name: "x",
        data: DataRef::Inline(&data),
        mode: PutMode::Replace { excl: false },
        policy: None,
    };
    assert_eq!(r.run(&put), Ok(Reply::Size(data.len() as u64)));
    let got = r
        .run(&Request::Get {
            bucket: b,
            name: "x",
            offset: 0,
            len: u64::MAX,
        })
        .unwrap();
    let (size, bytes) = r.bytes_of(got);
    assert_eq!(size, data.len() as u64);
    assert_eq!(bytes, data);
}

#[test]
fn a_put_through_a_lease_is_adopted_without_a_copy() {
    let mut r = rig();
    let b = r.bucket("b");
    let Ok(Reply::Lease { off, len }) = r.run(&Request::Lease {
        want_bytes: 1 << 20,
    }) else {
        panic!("no lease");
    };
    assert!(len >= 4096);
    let data = pattern(4096, 9);
    // What a client does in shared memory: write into its leased range.
    r.engine.core.tiers.arena.write(off, &data).unwrap();
    let put = Request::Put {
        bucket: b,
        name: "k",
        data: DataRef::Lease { off, len: 4096 },
        mode: PutMode::Replace { excl: false },
        policy: None,
    };
    assert_eq!(r.run(&put), Ok(Reply::Size(4096)));
    let got = r
        .run(&Request::Get {
            bucket: b,
            name: "k",
            offset: 0,
            len: 4096,
        })
        .unwrap();
    if let Reply::Extents { extents, .. } = &got {
        let e: &ReadExtent = &extents[0];
        assert_eq!(
            (e.tier, e.phys_off),
            (0, off),
            "the leased bytes themselves"
        );
    }
    assert_eq!(r.bytes_of(got).1, data);
}

#[test]
fn misuse_is_an_error_code_not_a_panic() {
    let mut r = rig();
    let b = r.bucket("b");
    // Lease data without a lease.
    let put = Request::Put {
        bucket: b,
        name: "k",
        data: DataRef::Lease { off: 0, len: 16 },
        mode: PutMode::Replace { excl: false },
        policy: None,
    };
    assert_eq!(r.run(&put), Err(Errno::Malformed));
    // A blob that does not exist, a bucket that does not exist.
    let get = |bucket, name| Request::Get {
        bucket,
        name,
        offset: 0,
        len: 1,
    };
    assert_eq!(r.run(&get(b, "nope")), Err(Errno::NoBlob));
    assert!(r.run(&get(b + 1000, "x")).is_err());
    // An exclusive put of an existing blob.
    let data = [1u8; 10];
    let excl = |excl| Request::Put {
        bucket: b,
        name: "e",
        data: DataRef::Inline(&data),
        mode: PutMode::Replace { excl },
        policy: None,
    };
    assert_eq!(r.run(&excl(true)), Ok(Reply::Size(10)));
    assert_eq!(r.run(&excl(true)), Err(Errno::Exists));
}

#[test]
fn a_scratch_file_is_written_read_truncated_and_unlinked() {
    let mut r = rig();
    let path = "/engine-test/scratch.dat";
    let open = OpenFile {
        create: true,
        persist: Persist::Scratch,
        mode: 0o644,
        dest: Some(DestInfo::default()),
        ..OpenFile::default()
    };
    let Ok(Reply::FileOpened { id, created, attr }) = r.run(&Request::FileOpen { path, open })
    else {
        panic!("open failed");
    };
    assert!(created);
    assert_eq!(attr.size, 0);
    // Page-unaligned writes at offsets, then an append.
    let a = pattern(10_000, 1);
    let c = pattern(5_000, 2);
    let w = |at, data| Request::FileWrite {
        file: id,
        at,
        data: DataRef::Inline(data),
    };
    assert_eq!(
        r.run(&w(Some(100), &a)),
        Ok(Reply::Written {
            at: 100,
            size: 10_100
        })
    );
    assert_eq!(
        r.run(&w(None, &c)),
        Ok(Reply::Written {
            at: 10_100,
            size: 15_100
        })
    );
    let mut want = vec![0u8; 100];
    want.extend_from_slice(&a);
    want.extend_from_slice(&c);
    let read = r
        .run(&Request::FileRead {
            file: id,
            offset: 0,
            len: 1 << 20,
        })
        .unwrap();
    let (size, bytes) = r.bytes_of(read);
    assert_eq!(size, 15_100);
    assert_eq!(bytes, want, "holes read as zeros, data as written");
    // Truncate, stat, unlink.
    assert_eq!(
        r.run(&Request::FileTruncate { file: id, size: 50 }),
        Ok(Reply::Done)
    );
    let Ok(Reply::FileAttr(attr)) = r.run(&Request::FileStat {
        file: FileRef::Id(id),
        dest: None,
    }) else {
        panic!("stat failed");
    };
    assert_eq!(attr.size, 50);
    assert!(matches!(
        r.run(&Request::FileUnlink { path, claim: false }),
        Ok(Reply::Unlinked(_))
    ));
    assert!(r
        .run(&Request::FileStat {
            file: FileRef::Path(path),
            dest: None,
        })
        .is_err());
}

/// `Engine::serve` — what a transport calls — answers through the
/// transport's closure exactly once and then lets the observers see the
/// request: the I/O log gets the put and the get with the caller's pid,
/// with no transport code involved.
#[test]
fn serve_answers_once_and_feeds_the_io_log() {
    let mut r = rig();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("io.trace");
    r.engine.trace = crate::trace::Tracer::start(&log, 1 << 30, vec!["ram".into()]).unwrap();
    let b = r.bucket("served");
    let caller = Caller {
        pid: 4242,
        ..CALLER
    };
    let put = Request::Put {
        bucket: b,
        name: "blob",
        data: DataRef::Inline(b"twelve bytes"),
        mode: PutMode::Replace { excl: false },
        policy: None,
    };
    let mut answers = 0;
    let size = r.engine.serve(caller, &mut r.lease, &put, |res| {
        answers += 1;
        match res {
            Ok(Reply::Size(n)) => *n,
            other => panic!("put: {other:?}"),
        }
    });
    assert_eq!((answers, size), (1, 12));
    let get = Request::Get {
        bucket: b,
        name: "blob",
        offset: 0,
        len: 64,
    };
    let got = r.engine.serve(caller, &mut r.lease, &get, |res| {
        res.as_ref()
            .map(|reply| reply.clone().into_owned())
            .map_err(|e| *e)
    });
    let (size, bytes) = r.bytes_of(got.unwrap());
    assert_eq!((size, bytes.as_slice()), (12, &b"twelve bytes"[..]));
    let missing = Request::Get {
        bucket: b,
        name: "absent",
        offset: 0,
        len: 1,
    };
    let e = r
        .engine
        .serve(caller, &mut r.lease, &missing, |res| res.clone().err());
    assert_eq!(e, Some(Errno::NoBlob));
    r.engine.trace.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for (line, op) in lines.iter().zip(["put", "get", "get"]) {
        assert!(line.contains(&format!("\"op\":\"{op}\"")), "{line}");
        assert!(line.contains("\"pid\":4242"), "{line}");
    }
    assert!(
        lines[2].contains("\"err\":\"STRATA_ENOBLOB\""),
        "{}",
        lines[2]
    );
}

/// Of two claiming unlinks of a file whose record has a destination file,
/// exactly one removes the record; the other gets `NoFile` (not "no record,
/// remove the destination yourself") until the first says it is done or a
/// record is created at the path again. A non-claiming unlink (a rename's
/// target) is never refused.
#[test]
fn a_claimed_unlink_wins_once() {
    let mut r = rig();
    let path = "/engine-test/backed.dat";
    let open = |create| OpenFile {
        create,
        persist: Persist::Default,
        mode: 0o644,
        dest: Some(DestInfo {
            exists: true,
            mode: 0o100644,
            size: 10,
            ..DestInfo::default()
        }),
        ..OpenFile::default()
    };
    let Ok(Reply::FileOpened { .. }) = r.run(&Request::FileOpen {
        path,
        open: open(false),
    }) else {
        panic!("open of a destination file failed");
    };
    let claim = Request::FileUnlink { path, claim: true };
    let Ok(Reply::Unlinked(u)) = r.run(&claim) else {
        panic!("first unlink failed");
    };
    assert!(u.existed && u.dest_may_exist, "{u:?}");
    assert_eq!(r.run(&claim), Err(Errno::NoFile), "the racing claim loses");
    // meanwhile no record is made from the destination file being removed
    // (a stat by a racing `rm` did that: two unlinks succeeded)
    assert_eq!(
        r.run(&Request::FileOpen {
            path,
            open: open(false),
        }),
        Err(Errno::NoFile)
    );
    assert!(matches!(
        r.run(&Request::FileUnlink { path, claim: false }),
        Ok(Reply::Unlinked(Unlinked { existed: false, .. }))
    ));
    // the winner is done: a later unlink of a destination-only file works
    assert!(matches!(
        r.run(&Request::FileIdle {
            path,
            unlinked: true
        }),
        Ok(Reply::Idle(_))
    ));
    assert!(matches!(
        r.run(&claim),
        Ok(Reply::Unlinked(Unlinked { existed: false, .. }))
    ));
    // a record created at the path clears a mark too
    let Ok(Reply::FileOpened { .. }) = r.run(&Request::FileOpen {
        path,
        open: open(true),
    }) else {
        panic!("reopen failed");
    };
    let Ok(Reply::Unlinked(u)) = r.run(&claim) else {
        panic!("unlink failed");
    };
    assert!(u.existed);
    assert_eq!(r.run(&claim), Err(Errno::NoFile));
    let Ok(Reply::FileOpened { created, .. }) = r.run(&Request::FileOpen {
        path,
        open: OpenFile {
            dest: Some(DestInfo::default()),
            ..open(true)
        },
    }) else {
        panic!("create failed");
    };
    assert!(created);
    assert!(matches!(
        r.run(&claim),
        Ok(Reply::Unlinked(Unlinked { existed: true, .. }))
    ));
}

/// Pages where written, the owner's side (docs/FILES-ACROSS-NODES.md,
/// step 2): whole pages another node publishes leave the owner's buffer
/// and read as `TIER_REMOTE` runs naming the holder and the generation;
/// the size grows; truncation unpublishes what it cuts; a partial page,
/// pages beyond the size and the owner itself are refused.
#[test]
fn published_pages_read_as_remote_runs_at_their_generation() {
    let mut r = rig();
    let path = "/engine-test/published.dat";
    let id = r.scratch_file(path);
    // the owner has 4 pages of its own
    let mine = pattern(4 << 12, 9);
    assert!(matches!(
        r.run(&Request::FileWrite {
            file: id,
            at: Some(0),
            data: DataRef::Inline(&mine)
        }),
        Ok(Reply::Written { .. })
    ));
    let publish = |first_page, pages, size| Request::FilePublish {
        file: id,
        holder: 3,
        first_page,
        pages,
        size,
    };
    // node 3 publishes pages 2..=5 and says the file is 6 pages + 100 bytes
    let Ok(Reply::Size(gen)) = r.run(&publish(2, 4, (6 << 12) + 100)) else {
        panic!("publish refused");
    };
    assert!(gen > 0);
    let (size, remote) = r.remote_runs(id);
    assert_eq!(size, (6 << 12) + 100);
    assert_eq!(remote.len(), 1, "{remote:?}");
    assert_eq!(
        (
            remote[0].logical_off,
            remote[0].len,
            remote[0].epoch,
            remote[0].phys_off
        ),
        (2 << 12, 4 << 12, 3, gen)
    );
    // the owner's first two pages are still its own
    let head = r
        .run(&Request::FileRead {
            file: id,
            offset: 0,
            len: 2 << 12,
        })
        .unwrap();
    let (_, bytes) = r.bytes_of(head);
    assert_eq!(bytes, mine[..2 << 12]);
    // a later publish of page 3 wins with a new generation
    let Ok(Reply::Size(gen2)) = r.run(&publish(3, 1, (6 << 12) + 100)) else {
        panic!("publish refused");
    };
    assert!(gen2 > gen);
    // refused: a page beyond the size, no pages, the owner as holder
    assert_eq!(r.run(&publish(6, 1, 6 << 12)), Err(Errno::Inval));
    assert_eq!(r.run(&publish(1, 0, 6 << 12)), Err(Errno::Inval));
    assert_eq!(
        r.run(&Request::FilePublish {
            file: id,
            holder: 0,
            first_page: 0,
            pages: 1,
            size: 1 << 12
        }),
        Err(Errno::Inval)
    );
    // truncating into a remote page needs it back first (not built yet)
    assert_eq!(
        r.run(&Request::FileTruncate {
            file: id,
            size: (3 << 12) + 5
        }),
        Err(Errno::Busy)
    );
    // truncating at a page boundary unpublishes what it cuts
    assert_eq!(
        r.run(&Request::FileTruncate {
            file: id,
            size: 3 << 12
        }),
        Ok(Reply::Done)
    );
    let (_, remote) = r.remote_runs(id);
    assert_eq!(remote.len(), 1);
    assert_eq!((remote[0].logical_off, remote[0].len), (2 << 12, 1 << 12));
    // a rename keeps the map (the record moves, its pages stay mapped)
    let renamed = "/engine-test/published-renamed.dat";
    assert!(r
        .run(&Request::FileRename {
            from: path,
            to: renamed,
            dest_renamed: true,
            tree: false,
            unbacked_only: false,
            unheld_only: false,
        })
        .is_ok());
    assert!(r
        .engine
        .core
        .file_remote_page(strata_meta::BucketId(id), 2)
        .is_some());
    // unlinked while held: an orphan keeps its map (open descriptors read on)
    assert!(matches!(
        r.run(&Request::FileUnlink {
            path: renamed,
            claim: false
        }),
        Ok(Reply::Unlinked(_))
    ));
    assert!(r
        .engine
        .core
        .file_remote_page(strata_meta::BucketId(id), 2)
        .is_some());
    assert!(r.engine.core.take_shadows_gone().is_empty());
    // its last close destroys it: the map goes, node 3 is to be told
    r.run(&Request::FileClose { file: id }).unwrap();
    assert!(r.engine.core.files.page_maps.is_empty());
    assert_eq!(r.engine.core.take_shadows_gone(), vec![(3, id)]);
    assert!(r.engine.core.take_shadows_gone().is_empty());
}

/// Pages where written, the owner's side of writes into pages another
/// node holds: a whole page written at the owner takes it back; a partial
/// one asks for its bytes (`NeedFill`), which come as a recall
/// (`FileFill` with the generation) — refused (`Stale`) at an old
/// generation — and the write then merges with them.
#[test]
fn writes_into_remote_pages_take_them_back_or_recall_them() {
    let mut r = rig();
    let path = "/engine-test/recalled.dat";
    let id = r.scratch_file(path);
    let publish = |first_page, pages| Request::FilePublish {
        file: id,
        holder: 5,
        first_page,
        pages,
        size: 4 << 12,
    };
    let Ok(Reply::Size(gen)) = r.run(&publish(0, 4)) else {
        panic!("publish refused");
    };
    let remote = |r: &mut Rig| -> Vec<(u64, u64)> {
        r.remote_runs(id)
            .1
            .iter()
            .map(|e| (e.logical_off, e.len))
            .collect()
    };
    assert_eq!(remote(&mut r), vec![(0, 4 << 12)]);
    // a whole page written here: the owner's again
    let page1 = pattern(1 << 12, 3);
    assert!(matches!(
        r.run(&Request::FileWrite {
            file: id,
            at: Some(1 << 12),
            data: DataRef::Inline(&page1)
        }),
        Ok(Reply::Written { .. })
    ));
    assert_eq!(remote(&mut r), vec![(0, 1 << 12), (2 << 12, 2 << 12)]);
    // a partial write into page 2 needs its bytes
    assert_eq!(
        r.run(&Request::FileWrite {
            file: id,
            at: Some((2 << 12) + 7),
            data: DataRef::Inline(b"mid")
        }),
        Ok(Reply::NeedFill { page_off: 2 << 12 })
    );
    let holder_bytes = pattern(1 << 12, 8);
    let recall = |gen| Request::FileFill {
        file: id,
        page_off: 2 << 12,
        data: DataRef::Inline(&holder_bytes),
        keep: true,
        gen,
    };
    // a generation that is not the page's: read it again
    assert_eq!(r.run(&recall(gen + 1)), Err(Errno::Stale));
    assert_eq!(r.run(&recall(gen)), Ok(Reply::Filled { inserted: true }));
    assert_eq!(remote(&mut r), vec![(0, 1 << 12), (3 << 12, 1 << 12)]);
    // taken already: a second recall is stale
    assert_eq!(r.run(&recall(gen)), Err(Errno::Stale));
    assert!(matches!(
        r.run(&Request::FileWrite {
            file: id,
            at: Some((2 << 12) + 7),
            data: DataRef::Inline(b"mid")
        }),
        Ok(Reply::Written { .. })
    ));
    let got = r
        .run(&Request::FileRead {
            file: id,
            offset: 1 << 12,
            len: 2 << 12,
        })
        .unwrap();
    let (_, bytes) = r.bytes_of(got);
    let mut want = page1.clone();
    let mut p2 = holder_bytes.clone();
    p2[7..10].copy_from_slice(b"mid");
    want.extend_from_slice(&p2);
    assert_eq!(bytes, want);
    // a shared mapping's backing waits for the pages to come back
    assert_eq!(
        r.engine
            .core
            .file_backing(strata_meta::BucketId(id), None)
            .err(),
        Some(Errno::Busy)
    );
}

/// `FileRename { unheld_only }` (a move between two nodes copies the file):
/// `Busy` and nothing moves while another process holds the file open;
/// once only the caller holds it, the record moves.
#[test]
fn a_rename_for_a_move_between_nodes_waits_for_no_other_holder() {
    let mut r = rig();
    let (from, to) = ("/engine-test/held.dat", "/.strata-moving/0-1-0");
    let id = r.scratch_file(from);
    let other = Caller {
        client: CALLER.client + 1,
        ..CALLER
    };
    r.engine
        .execute(other, &mut None, &Request::FileHold { file: id })
        .unwrap();
    let rename = Request::FileRename {
        from,
        to,
        dest_renamed: false,
        tree: false,
        unbacked_only: true,
        unheld_only: true,
    };
    assert_eq!(r.run(&rename).unwrap_err(), Errno::Busy);
    assert!(r.engine.core.file_lookup(from).is_some(), "nothing moved");
    r.engine
        .execute(other, &mut None, &Request::FileClose { file: id })
        .unwrap();
    // the caller's own hold does not count
    assert!(matches!(r.run(&rename), Ok(Reply::Moved(1))));
    assert_eq!(r.engine.core.file_lookup(to).map(|b| b.0), Some(id));
    assert!(r.engine.core.file_lookup(from).is_none());
}

/// Pages where written, the sweep (`cluster.shadow_sweep_interval`): the
/// owner names the asked ids it has no file record of; the holder drops a
/// shadow of such a file only if it is the record it saw and unchanged
/// since (a write after the question may belong to a newer file that
/// reuses the id), and a DEFAULT file's shadow is kept as WORKFLOW.
#[test]
fn a_sweep_drops_shadows_of_files_their_owner_lost_unless_written_since() {
    use crate::files_publish::shadow_path;
    let mut r = rig();
    // owner side
    let mine = r.scratch_file("/engine-test/kept.dat");
    let never = mine + 1_000;
    assert_eq!(r.engine.core.files_unknown(&[mine, never]), vec![never]);
    // holder side: shadows of two files node 5 owns
    let foreign = |n: u64| (5u64 << strata_meta::NODE_SHIFT) | n;
    let shadow_of = |r: &mut Rig, file: u64| -> u64 {
        let Ok(Reply::FileOpened { id, .. }) = r.run(&Request::FileOpen {
            path: &shadow_path(file),
            open: OpenFile {
                create: true,
                persist: Persist::Workflow,
                mode: 0o600,
                page_shift: 12,
                dest: Some(DestInfo::default()),
                ..OpenFile::default()
            },
        }) else {
            panic!("shadow open failed");
        };
        assert!(matches!(
            r.run(&Request::FileWrite {
                file: id,
                at: Some(0),
                data: DataRef::Inline(&pattern(2 << 12, file as u8)),
            }),
            Ok(Reply::Written { .. })
        ));
        id
    };
    let (a, b) = (foreign(7), foreign(8));
    let sa = shadow_of(&mut r, a);
    let sb = shadow_of(&mut r, b);
    let seen = r.engine.core.shadow_sweep_snapshot();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let seen_of = |f: u64| *seen.iter().find(|s| s.file == f).expect("seen");
    // b is written after the question: kept
    assert!(matches!(
        r.run(&Request::FileWrite {
            file: sb,
            at: Some(2 << 12),
            data: DataRef::Inline(&pattern(1 << 12, 3)),
        }),
        Ok(Reply::Written { .. })
    ));
    assert_eq!(r.engine.core.shadow_drop_unchanged(&seen_of(b)), Ok(false));
    assert_eq!(r.engine.core.shadow_drop_unchanged(&seen_of(a)), Ok(true));
    assert!(r.engine.core.meta.bucket_by_name(&shadow_path(a)).is_none());
    assert!(r
        .engine
        .core
        .meta
        .bucket(strata_meta::BucketId(sa))
        .is_err());
    assert!(r.engine.core.meta.bucket_by_name(&shadow_path(b)).is_some());
    // a shadow made again under the same name is another record: kept
    let sa2 = shadow_of(&mut r, a);
    assert_ne!(sa2, sa);
    assert_eq!(r.engine.core.shadow_drop_unchanged(&seen_of(a)), Ok(false));
    assert_eq!(r.engine.core.files.counters.shadows_swept_total, 1);
    // shadows are no files of this node's drain status
    let st = crate::stage::stage_state(&r.engine.core, None, &[]);
    assert!(
        st.files
            .iter()
            .all(|f| !f.path.starts_with("/.strata-shadow/")),
        "{:?}",
        st.files
    );
}
