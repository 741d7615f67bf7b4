//! The stat index (issue 18, target 2): a stat by path of a file nobody
//! holds is answered from shared memory, without a request — and never
//! with attributes the daemon no longer has.

mod common;

use common::{TestDaemon, Tiers};
use strata_client::file::{OpenFlags, Persist, SetAttr};
use strata_client::Client;

fn requests(d: &TestDaemon) -> u64 {
    d.status().requests_total
}

fn published(d: &TestDaemon) -> u64 {
    d.status().stat_index.map_or(0, |s| s.published)
}

/// Waits (bounded) until the daemon publishes at least `n` records (a
/// close is sent without waiting for its answer).
fn published_reach(d: &TestDaemon, n: u64) -> u64 {
    let mut seen = 0;
    // Bounded: 500 × 20 ms.
    for _ in 0..500 {
        seen = published(d);
        if seen >= n {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    seen
}

/// Creates `path` (SCRATCH) with `bytes`, and closes it.
fn write_file(c: &Client, path: &str, bytes: &[u8]) {
    let fl = OpenFlags {
        read: true,
        write: true,
        create: true,
        ..OpenFlags::default()
    };
    let a = c
        .file_open(path, fl, 0o644, Persist::Scratch, 4096)
        .unwrap();
    c.file_write(a.id, 0, bytes).unwrap();
    c.file_close(a.id).unwrap();
}

fn size_of(c: &Client, path: &str) -> Option<u64> {
    c.file_stat_path(path).unwrap().map(|a| a.size)
}

#[test]
fn a_closed_file_is_stat_without_a_request_and_every_change_is_seen() {
    let d = TestDaemon::small();
    let dir = d.path().join("files");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("f").to_str().unwrap().to_string();
    let (c, other) = (d.client(), d.client());
    write_file(&c, &p, &[1u8; 100]);
    assert!(published_reach(&d, 1) >= 1, "the last close publishes");

    // 1000 stats: served from the index, not as requests.
    let before = requests(&d);
    let first = c.file_stat_path(&p).unwrap().expect("a record");
    for _ in 0..1000 {
        assert_eq!(c.file_stat_path(&p).unwrap(), Some(first));
    }
    let asked = requests(&d) - before;
    assert!(
        asked < 50,
        "{asked} requests for 1000 stats of a quiet file"
    );
    assert_eq!(first.size, 100);
    assert_eq!(first.holders, 0);

    // Every change made by another client is seen by the next stat, the
    // moment the change's request is answered.
    let fl = OpenFlags {
        write: true,
        ..OpenFlags::default()
    };
    let a = other.file_open(&p, fl, 0, Persist::Scratch, 4096).unwrap();
    assert_eq!(c.file_stat_path(&p).unwrap().unwrap().holders, 1, "held");
    other.file_write(a.id, 100, &[2u8; 150]).unwrap();
    assert_eq!(size_of(&c, &p), Some(250), "written while held");
    other.file_close(a.id).unwrap();
    assert_eq!(size_of(&c, &p), Some(250));
    published_reach(&d, 1);
    let before = requests(&d);
    assert_eq!(size_of(&c, &p), Some(250));
    assert!(
        requests(&d) - before < 3,
        "published again at the last close"
    );

    other
        .file_set_attr(
            0,
            &p,
            SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(c.file_stat_path(&p).unwrap().unwrap().mode, 0o600, "chmod");
    let t = SetAttr {
        mtime_ns: Some(1_000_000_000),
        ..SetAttr::default()
    };
    other.file_set_attr(0, &p, t).unwrap();
    assert_eq!(
        c.file_stat_path(&p).unwrap().unwrap().mtime_ns,
        1_000_000_000
    );

    let l = dir.join("link").to_str().unwrap().to_string();
    other.file_link(&p, &l).unwrap();
    assert_eq!(c.file_stat_path(&p).unwrap().unwrap().nlink, 2, "linked");
    assert!(other.file_unlink(&l).unwrap());
    assert_eq!(c.file_stat_path(&p).unwrap().unwrap().nlink, 1, "link gone");

    let q = dir.join("g").to_str().unwrap().to_string();
    c.file_stat_path(&p).unwrap();
    assert!(other.file_rename(&p, &q, false).unwrap());
    assert_eq!(size_of(&c, &p), None, "renamed away");
    assert_eq!(size_of(&c, &q), Some(250));
    c.file_stat_path(&q).unwrap();
    // replaced by a rename: the new record's attributes, not the old ones
    write_file(&other, &p, &[3u8; 7]);
    c.file_stat_path(&p).unwrap();
    assert!(other.file_rename(&p, &q, false).unwrap());
    assert_eq!(size_of(&c, &q), Some(7), "replaced by a rename");
    assert!(other.file_unlink(&q).unwrap());
    assert_eq!(size_of(&c, &q), None, "unlinked");
    // made again under the same name
    write_file(&other, &q, &[4u8; 3]);
    assert_eq!(size_of(&c, &q), Some(3), "made again");
    let st = d.status().stat_index.expect("the index is on by default");
    assert!(st.entries >= 32768 && st.forgotten_total >= 5, "{st:?}");
}

#[test]
fn with_the_index_off_every_stat_is_a_request() {
    let mut d = TestDaemon::configured(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml: "",
    });
    let yaml = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        yaml.replacen("  log: warn\n", "  log: warn\n  stat_index: 0\n", 1),
    )
    .unwrap();
    d.spawn();
    assert!(d.status().stat_index.is_none());
    let c = d.client();
    let p = d.path().join("f").to_str().unwrap().to_string();
    write_file(&c, &p, b"abc");
    let before = requests(&d);
    for _ in 0..200 {
        assert_eq!(size_of(&c, &p), Some(3));
    }
    assert!(requests(&d) - before >= 200, "every stat asked the daemon");
}

/// After a `kill -9` of the daemon, a stat must not answer from the dead
/// daemon's index: it fails (or finds a new daemon), never reports a
/// record nobody keeps.
#[test]
fn a_dead_daemon_s_index_is_not_read() {
    let mut d = TestDaemon::small();
    let c = d.client();
    let p = d.path().join("f").to_str().unwrap().to_string();
    write_file(&c, &p, b"abcdef");
    assert!(published_reach(&d, 1) >= 1);
    assert_eq!(size_of(&c, &p), Some(6));
    d.kill9();
    // Bounded: the client looks at the daemon's liveness at least every
    // millisecond; a stat in the first one may still answer (as one that
    // raced the crash).
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        c.file_stat_path(&p).is_err(),
        "a stat after the daemon died answered"
    );
}

/// The request budget of mdtest's read phase (open, read to the end,
/// close): a read larger than the file is answered by one request (the
/// reply's size says where the file ends), and a stat of a closed file by
/// none.
#[test]
fn reading_a_small_file_whole_costs_one_request_and_its_stat_none() {
    let d = TestDaemon::small();
    let c = d.client();
    let p = d.path().join("small").to_str().unwrap().to_string();
    write_file(&c, &p, &[9u8; 4096]);
    let fl = OpenFlags {
        read: true,
        ..OpenFlags::default()
    };
    let a = c.file_open(&p, fl, 0, Persist::Scratch, 4096).unwrap();
    let mut buf = vec![0u8; 65536];
    let before = requests(&d);
    assert_eq!(c.file_read(a.id, 0, &mut buf).unwrap(), 4096);
    assert_eq!(
        requests(&d) - before,
        1,
        "one request for a read past the end"
    );
    assert!(buf[..4096].iter().all(|&b| b == 9));
    assert_eq!(c.file_read(a.id, 4096, &mut buf).unwrap(), 0, "at the end");
    c.file_close(a.id).unwrap();
    published_reach(&d, 1);
    let before = requests(&d);
    assert_eq!(size_of(&c, &p), Some(4096));
    assert_eq!(requests(&d) - before, 0, "a stat of a closed file");
}
