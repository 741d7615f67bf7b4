//! The stat index against the engine's own answers: random file operations
//! by two clients, and after each one every path's published entry (read
//! through the index's reader, as a client would) must be what `FileStat`
//! by that path answers — or absent. The daemon's audit must agree too.

use strata_meta::{BucketId, StatPublished};
use strata_proto::msg::{DataRef, FileRef, Reply, Request};
use strata_proto::types::{DestInfo, FileAttr, OpenFile, Persist, SetAttr};
use strata_transport_shm::stat_index::{StatReader, StatWriter};

use crate::testutil::fixture;
use crate::{Caller, Engine};

/// The real shared-memory index, as the daemon installs it.
struct Ix(StatWriter);

impl StatPublished for Ix {
    fn forget(&mut self, id: BucketId) {
        self.0.forget(id.0)
    }
    fn publish(&mut self, path: &str, attr: &FileAttr) {
        self.0.publish(path.as_bytes(), attr);
    }
    fn peek(&self, id: BucketId) -> Option<(Vec<u8>, FileAttr)> {
        self.0.peek(id.0)
    }
    fn published_ids(&self) -> Vec<BucketId> {
        self.0.published_ids().into_iter().map(BucketId).collect()
    }
    fn counts(&self) -> (u64, u64, u64, u64) {
        (0, self.0.published() as u64, self.0.published_total, 0)
    }
}

fn caller(client: u64) -> Caller {
    Caller {
        client,
        channel: 0,
        pid: client as u32,
        reply_bytes_max: 64 << 10,
    }
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const PATHS: [&str; 4] = ["/t/a", "/t/b", "/t/c", "/t/dd"];

fn run(e: &mut Engine, client: u64, req: &Request) -> Result<Reply<'static>, strata_proto::Errno> {
    e.execute(caller(client), &mut None, req)
        .map(Reply::into_owned)
}

/// Every path: what the index says equals what a request answers.
fn check(e: &mut Engine, r: &StatReader, step: usize, what: &str) -> usize {
    let mut hits = 0;
    for p in PATHS {
        let Some(seen) = r.lookup(p.as_bytes()) else {
            continue;
        };
        hits += 1;
        let asked = run(
            e,
            9,
            &Request::FileStat {
                file: FileRef::Path(p),
                dest: None,
            },
        );
        assert_eq!(
            asked,
            Ok(Reply::FileAttr(seen)),
            "step {step} ({what}): {p} published {seen:?}"
        );
    }
    if let Err(m) = e.core.stat_audit() {
        panic!("step {step} ({what}): audit: {m}");
    }
    hits
}

fn one_seed(seed: u64) -> (usize, usize) {
    let f = fixture(8 << 20, 32 << 20, 1 << 20);
    let name = format!("strata-test-statix-engine-{}-{seed}", std::process::id());
    let w = StatWriter::create(&name, 64).unwrap();
    let reader = StatReader::open(&name).unwrap();
    // both are mapped: the name goes (nothing left in /dev/shm)
    strata_shm::ShmSegment::unlink(&name).unwrap();
    let mut core = f.core;
    core.meta.set_stat_index(Box::new(Ix(w)));
    let mut e = Engine::new(core, None);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // (client, id) of open descriptors
    let mut open: Vec<(u64, u64)> = Vec::new();
    let (mut hits, mut published) = (0, 0);
    for step in 0..600 {
        let client = 1 + rng.below(2);
        let p = PATHS[rng.below(PATHS.len() as u64) as usize];
        let q = PATHS[rng.below(PATHS.len() as u64) as usize];
        let what = match rng.below(11) {
            0 | 1 => {
                let o = OpenFile {
                    create: true,
                    persist: Persist::Scratch,
                    mode: 0o644,
                    page_shift: 12,
                    trunc: rng.below(4) == 0,
                    dest: Some(DestInfo::default()),
                    ..OpenFile::default()
                };
                if let Ok(Reply::FileOpened { id, .. }) =
                    run(&mut e, client, &Request::FileOpen { path: p, open: o })
                {
                    open.push((client, id));
                }
                "open"
            }
            2 if !open.is_empty() => {
                let (c, id) = open.swap_remove(rng.below(open.len() as u64) as usize);
                if !open.contains(&(c, id)) {
                    let _ = run(&mut e, c, &Request::FileClose { file: id });
                }
                "close"
            }
            3 if !open.is_empty() => {
                let (c, id) = open[rng.below(open.len() as u64) as usize];
                let data = vec![step as u8; 1 + rng.below(9000) as usize];
                let at = rng.below(3) * 3000;
                let _ = run(
                    &mut e,
                    c,
                    &Request::FileWrite {
                        file: id,
                        at: Some(at),
                        data: DataRef::Inline(&data),
                    },
                );
                "write"
            }
            4 if !open.is_empty() => {
                let (c, id) = open[rng.below(open.len() as u64) as usize];
                let size = rng.below(12_000);
                let _ = run(&mut e, c, &Request::FileTruncate { file: id, size });
                "truncate"
            }
            5 => {
                let _ = run(
                    &mut e,
                    client,
                    &Request::FileStat {
                        file: FileRef::Path(p),
                        dest: None,
                    },
                );
                "stat"
            }
            6 => {
                let a = SetAttr {
                    mode: Some(0o600 | rng.below(0o100) as u32),
                    ..SetAttr::default()
                };
                let _ = run(
                    &mut e,
                    client,
                    &Request::FileSetAttr {
                        file: FileRef::Path(p),
                        attr: a,
                    },
                );
                "chmod"
            }
            7 => {
                let _ = run(
                    &mut e,
                    client,
                    &Request::FileRename {
                        from: p,
                        to: q,
                        dest_renamed: false,
                        tree: false,
                        unbacked_only: false,
                        unheld_only: false,
                    },
                );
                "rename"
            }
            8 => {
                let _ = run(
                    &mut e,
                    client,
                    &Request::FileLink {
                        existing: p,
                        new: q,
                    },
                );
                "link"
            }
            9 => {
                let _ = run(
                    &mut e,
                    client,
                    &Request::FileUnlink {
                        path: p,
                        claim: false,
                    },
                );
                "unlink"
            }
            _ => {
                if rng.below(8) == 0 {
                    e.core.file_client_gone(client);
                    open.retain(|&(c, _)| c != client);
                    "client gone"
                } else {
                    "nothing"
                }
            }
        };
        hits += check(&mut e, &reader, step, what);
        published = published.max(
            e.core
                .meta
                .stat_index()
                .map_or(0, |i| i.counts().1 as usize),
        );
    }
    (hits, published)
}

#[test]
fn published_attributes_are_always_what_a_stat_by_path_answers() {
    let mut hits = 0;
    for seed in 1..=12 {
        hits += one_seed(seed).0;
    }
    // the index was used, not just left empty
    assert!(hits > 100, "only {hits} entries found in 12 runs");
}
