//! The whole native API surface, and the `strata` command line, against a
//! real daemon process.

mod common;
mod util;

use std::collections::HashSet;
use std::process::Stdio;

use common::{TestDaemon, Tiers};
use strata_client::{Errno, Placement, PutOptions};
use util::{errno_of, random_bytes};

fn small() -> TestDaemon {
    TestDaemon::small()
}

#[test]
fn buckets_create_open_list_rename_tag_destroy() {
    let d = small();
    let c = d.client();
    let a = c.bucket_create("alpha").unwrap();
    assert_eq!(
        errno_of(c.bucket_create("alpha")),
        Errno::Exists,
        "exclusive create of an existing bucket"
    );
    let a2 = c.bucket("alpha").unwrap();
    assert_eq!(a2.id(), a.id(), "bucket() opens the existing bucket");
    assert_eq!(c.bucket_open("alpha").unwrap().id(), a.id());
    assert_eq!(errno_of(c.bucket_open("nope")), Errno::NoBucket);
    let z = c.bucket("zulu").unwrap();
    let m = c.bucket("mike").unwrap();
    assert_ne!(z.id(), m.id());
    let names = c.bucket_names().unwrap();
    assert_eq!(names, vec!["alpha", "mike", "zulu"], "bucket names sorted");

    // size: bytes and blob count follow puts, overwrites and deletes.
    assert_eq!(a.size().unwrap(), (0, 0));
    a.put("x", &[1u8; 1000]).unwrap();
    a.put("y", &[2u8; 24]).unwrap();
    assert_eq!(a.size().unwrap(), (1024, 2));
    a.put("x", &[1u8; 10]).unwrap();
    assert_eq!(a.size().unwrap(), (34, 2));
    a.delete("y").unwrap();
    assert_eq!(a.size().unwrap(), (10, 1));

    // rename: the handle keeps working, the old name is gone, a taken name is refused.
    a.rename("bravo").unwrap();
    assert_eq!(a.name(), "bravo");
    assert_eq!(errno_of(c.bucket_open("alpha")), Errno::NoBucket);
    assert_eq!(c.bucket_open("bravo").unwrap().id(), a.id());
    assert_eq!(a.get("x").unwrap(), vec![1u8; 10]);
    assert_eq!(a.rename("zulu").unwrap_err().errno, Errno::Exists);
    assert_eq!(c.bucket_names().unwrap(), vec!["bravo", "mike", "zulu"]);

    // tags: set, overwrite, remove with an empty value.
    a.tag("owner", "me").unwrap();
    a.tag("kind", "ckpt").unwrap();
    a.tag("owner", "you").unwrap();
    let mut tags = a.tags().unwrap();
    tags.sort();
    assert_eq!(
        tags,
        vec![
            ("kind".to_string(), "ckpt".to_string()),
            ("owner".to_string(), "you".to_string())
        ]
    );
    a.tag("kind", "").unwrap();
    assert_eq!(
        a.tags().unwrap(),
        vec![("owner".to_string(), "you".to_string())]
    );

    // destroy: bucket and blobs gone, space returned, other handles see NoBucket.
    let used_before = d.status().tiers.iter().map(|t| t.used_bytes).sum::<u64>();
    assert!(used_before > 0);
    a.destroy().unwrap();
    assert_eq!(a2.get("x").unwrap_err().errno, Errno::NoBucket);
    assert_eq!(a2.size().unwrap_err().errno, Errno::NoBucket);
    assert_eq!(c.bucket_names().unwrap(), vec!["mike", "zulu"]);
    let st = d.status();
    assert_eq!(st.buckets, 2);
    assert_eq!(st.blobs, 0);
    assert_eq!(
        st.tiers.iter().map(|t| t.used_bytes).sum::<u64>(),
        0,
        "destroy freed the blobs' space"
    );
}

#[test]
fn blob_operations() {
    let d = small();
    let c = d.client();
    let b = c.bucket("blobs").unwrap();

    // put / get / overwrite / empty blob.
    let data = random_bytes(1, 100_000);
    b.put("one", &data).unwrap();
    assert_eq!(b.get("one").unwrap(), data);
    b.put("one", b"short").unwrap();
    assert_eq!(b.get("one").unwrap(), b"short");
    b.put("empty", &[]).unwrap();
    assert_eq!(b.get("empty").unwrap(), Vec::<u8>::new());
    assert_eq!(b.size_of("empty").unwrap(), 0);

    // exclusive put.
    let excl = PutOptions {
        exclusive: true,
        ..PutOptions::default()
    };
    assert_eq!(
        b.put_with("one", b"other", excl).unwrap_err().errno,
        Errno::Exists
    );
    assert_eq!(
        b.get("one").unwrap(),
        b"short",
        "a refused exclusive put changes nothing"
    );
    b.put_with("fresh", b"new", excl).unwrap();

    // put_at with a hole: the gap reads as zeros.
    let size = b.put_at("holey", 5000, &[7u8; 100]).unwrap();
    assert_eq!(size, 5100);
    let got = b.get("holey").unwrap();
    assert_eq!(got.len(), 5100);
    assert!(got[..5000].iter().all(|&x| x == 0), "hole reads as zeros");
    assert!(got[5000..].iter().all(|&x| x == 7));
    // Overwrite across the hole/data boundary.
    assert_eq!(b.put_at("holey", 4990, &[9u8; 20]).unwrap(), 5100);
    let got = b.get("holey").unwrap();
    assert!(got[..4990].iter().all(|&x| x == 0));
    assert!(got[4990..5010].iter().all(|&x| x == 9));
    assert!(got[5010..].iter().all(|&x| x == 7));

    // get_at: inside, short read at the end, past the end.
    let mut buf = [0xFFu8; 30];
    assert_eq!(b.get_at("holey", 4985, &mut buf).unwrap(), 30);
    assert_eq!(&buf[..5], &[0; 5]);
    assert_eq!(&buf[5..25], &[9; 20]);
    assert_eq!(&buf[25..], &[7; 5]);
    let mut buf = [0xFFu8; 64];
    assert_eq!(
        b.get_at("holey", 5090, &mut buf).unwrap(),
        10,
        "short read at the end"
    );
    assert_eq!(&buf[..10], &[7; 10]);
    assert_eq!(b.get_at("holey", 5100, &mut buf).unwrap(), 0, "read at EOF");
    assert_eq!(
        b.get_at("holey", 1 << 40, &mut buf).unwrap(),
        0,
        "read far past EOF"
    );
    assert_eq!(
        b.get_at("missing", 0, &mut buf).unwrap_err().errno,
        Errno::NoBlob
    );

    // append (creates the blob, then extends it).
    assert_eq!(b.append("log", b"abc").unwrap(), 3);
    assert_eq!(b.append("log", b"defg").unwrap(), 7);
    assert_eq!(b.append("log", &[]).unwrap(), 7);
    assert_eq!(b.get("log").unwrap(), b"abcdefg");

    // delete / exists / size_of.
    assert!(b.exists("log").unwrap());
    assert_eq!(b.size_of("log").unwrap(), 7);
    b.delete("log").unwrap();
    assert!(!b.exists("log").unwrap());
    assert_eq!(b.size_of("log").unwrap_err().errno, Errno::NoBlob);
    assert_eq!(b.get("log").unwrap_err().errno, Errno::NoBlob);
    assert_eq!(b.delete("log").unwrap_err().errno, Errno::NoBlob);

    // rename with and without replace.
    b.put("r1", b"first").unwrap();
    b.put("r2", b"second").unwrap();
    assert_eq!(
        b.rename_blob("r1", "r2", false).unwrap_err().errno,
        Errno::Exists
    );
    assert_eq!(
        b.get("r2").unwrap(),
        b"second",
        "refused rename changes nothing"
    );
    b.rename_blob("r1", "r2", true).unwrap();
    assert_eq!(b.get("r2").unwrap(), b"first");
    assert!(!b.exists("r1").unwrap());
    b.rename_blob("r2", "r3", false).unwrap();
    assert_eq!(b.get("r3").unwrap(), b"first");
    assert_eq!(
        b.rename_blob("r2", "r4", false).unwrap_err().errno,
        Errno::NoBlob
    );

    // list: sorted, complete.
    assert_eq!(
        b.list().unwrap(),
        vec!["empty", "fresh", "holey", "one", "r3"]
    );
    let st = d.status();
    assert_eq!(st.blobs, 5);
}

#[test]
fn list_many_blobs_paginates_in_order() {
    let d = small();
    let c = d.client();
    let b = c.bucket("many").unwrap();
    // Long names so one reply (8 KiB arg area) cannot hold them all.
    let mut names: Vec<String> = (0..600)
        .map(|i| format!("blob-{:05}-{}", (i * 7919) % 600, "x".repeat(40)))
        .collect();
    for n in &names {
        b.put(n, n.as_bytes()).unwrap();
    }
    names.sort();
    assert_eq!(b.list().unwrap(), names);
    // Many buckets too.
    for i in 0..300 {
        c.bucket(&format!("bucket-{i:04}-{}", "y".repeat(40)))
            .unwrap();
    }
    assert_eq!(c.bucket_names().unwrap().len(), 301);
}

#[test]
fn stat_access_count_dirty_and_score() {
    let d = small();
    let c = d.client();
    let b = c.bucket("stat").unwrap();
    b.put("s", &[5u8; 4096]).unwrap();
    let s0 = b.stat("s").unwrap();
    assert_eq!(s0.size, 4096);
    assert!(s0.dirty, "a fresh put is dirty (not flushed yet)");
    assert!(s0.extent_count >= 1);
    assert_ne!(s0.tier_mask, 0);
    assert!(s0.mtime_ns > 0 && s0.ctime_ns > 0);
    assert_eq!(s0.user_score, None);
    assert!((0.0..=1.0).contains(&s0.score));
    b.get("s").unwrap();
    let s1 = b.stat("s").unwrap();
    assert!(
        s1.access_count > s0.access_count,
        "get counts as an access: {} -> {}",
        s0.access_count,
        s1.access_count
    );
    let mut buf = [0u8; 10];
    b.get_at("s", 0, &mut buf).unwrap();
    let s2 = b.stat("s").unwrap();
    assert!(s2.access_count > s1.access_count);

    b.set_score("s", Some(0.25), false).unwrap();
    let s3 = b.stat("s").unwrap();
    assert_eq!(s3.user_score, Some(0.25));
    assert_eq!(s3.score, 0.25, "a user score wins");
    assert!(!s3.stationary);
    b.set_score("s", Some(1.0), true).unwrap();
    let s4 = b.stat("s").unwrap();
    assert_eq!(s4.user_score, Some(1.0));
    assert!(s4.stationary);
    b.set_score("s", None, false).unwrap();
    let s5 = b.stat("s").unwrap();
    assert_eq!(s5.user_score, None);
    assert!(!s5.stationary);
    assert_eq!(
        b.set_score("missing", Some(0.5), false).unwrap_err().errno,
        Errno::NoBlob
    );
}

#[test]
fn async_puts_and_gets_in_flight_together() {
    let d = small();
    let c = d.client();
    let b = c.bucket("async").unwrap();
    let blobs: Vec<(String, Vec<u8>)> = (0..12)
        .map(|i| {
            (
                format!("a{i}"),
                random_bytes(100 + i, 1000 + 50_000 * i as usize),
            )
        })
        .collect();
    let pending: Vec<_> = blobs
        .iter()
        .map(|(n, data)| b.put_async(n, data).unwrap())
        .collect();
    for p in pending {
        p.wait().unwrap();
    }
    let gets: Vec<_> = blobs.iter().map(|(n, _)| b.get_async(n).unwrap()).collect();
    for (g, (n, data)) in gets.into_iter().zip(&blobs) {
        assert_eq!(&g.wait().unwrap(), data, "async get of {n}");
    }
    // Mixed: a put in flight while a get of another blob is in flight.
    let p = b.put_async("late", b"late bytes").unwrap();
    let g = b.get_async("a3").unwrap();
    assert_eq!(g.wait().unwrap(), blobs[3].1);
    p.wait().unwrap();
    assert_eq!(b.get("late").unwrap(), b"late bytes");
    // A dropped pending put still completes.
    drop(b.put_async("dropped", b"zz").unwrap());
    assert_eq!(b.get("dropped").unwrap(), b"zz");
    assert_eq!(
        b.get_async("nope").unwrap().wait().unwrap_err().errno,
        Errno::NoBlob
    );
}

#[test]
fn round_robin_placement_uses_both_tiers() {
    let d = small();
    let c = d.client();
    let b = c.bucket("rr").unwrap();
    let opts = PutOptions {
        placement: Some(Placement::RoundRobin),
        ..PutOptions::default()
    };
    let mut mask = 0u32;
    for i in 0..6 {
        let data = random_bytes(i, 64 * 1024);
        b.put_with(&format!("rr{i}"), &data, opts).unwrap();
        let st = b.stat(&format!("rr{i}")).unwrap();
        assert_eq!(
            st.tier_mask.count_ones(),
            1,
            "a small put lands on one tier"
        );
        mask |= st.tier_mask;
    }
    assert_eq!(mask, 0b11, "round robin used ram (bit 0) and disk (bit 1)");
    for i in 0..6 {
        assert_eq!(
            b.get(&format!("rr{i}")).unwrap(),
            random_bytes(i, 64 * 1024)
        );
    }
    for p in [Placement::Random, Placement::MinimizeIoTime] {
        let o = PutOptions {
            placement: Some(p),
            ..PutOptions::default()
        };
        b.put_with("p", b"policy", o).unwrap();
        assert_eq!(b.get("p").unwrap(), b"policy");
    }
    let st = d.status();
    assert!(
        st.tiers[1].used_bytes > 0,
        "the disk tier holds round-robin blobs"
    );
}

#[test]
fn bucket_placement_policy_applies_to_its_puts() {
    let d = small();
    let c = d.client();
    let b = c.bucket("rr-bucket").unwrap();
    assert_eq!(
        b.tag("placement", "fastest").unwrap_err().errno,
        Errno::Inval
    );
    b.set_placement(Some(Placement::RoundRobin)).unwrap();
    let mut mask = 0u32;
    for i in 0..6 {
        b.put(&format!("k{i}"), &random_bytes(100 + i, 64 * 1024))
            .unwrap();
        mask |= b.stat(&format!("k{i}")).unwrap().tier_mask;
    }
    assert_eq!(
        mask, 0b11,
        "the bucket's round-robin policy used both tiers"
    );
    // Another bucket keeps the daemon default (RAM first for small puts).
    let other = c.bucket("default-bucket").unwrap();
    for i in 0..6 {
        other
            .put(&format!("k{i}"), &random_bytes(200 + i, 64 * 1024))
            .unwrap();
        assert_eq!(other.stat(&format!("k{i}")).unwrap().tier_mask, 0b01);
    }
}

#[test]
fn blobs_larger_than_the_lease() {
    // Lease 1 MiB (harness). 8 MiB and 40 MiB blobs, then one larger than
    // the whole arena (ram 16 MiB + 64 MiB staging), which can only go
    // through the chunked path.
    let d = TestDaemon::start_with(Tiers {
        ram: "16MiB",
        disk: Some("256MiB"),
        extra_yaml: "",
    });
    let c = d.client();
    let b = c.bucket("big").unwrap();
    for (name, len, seed) in [
        ("eight", 8usize << 20, 8u64),
        ("forty", 40 << 20, 40),
        ("huge", 96 << 20, 96),
    ] {
        let data = random_bytes(seed, len + 123);
        b.put(name, &data)
            .unwrap_or_else(|e| panic!("put {name}: {e}"));
        assert_eq!(b.size_of(name).unwrap(), data.len() as u64);
        let got = b.get(name).unwrap();
        assert!(got == data, "{name}: read back differs");
        // A partial read in the middle.
        let mut buf = vec![0u8; 3 << 20];
        assert_eq!(
            b.get_at(name, (len / 2) as u64, &mut buf).unwrap(),
            buf.len()
        );
        assert!(buf[..] == data[len / 2..len / 2 + buf.len()]);
    }
    assert_eq!(
        b.list().unwrap(),
        vec!["eight", "forty", "huge"],
        "no temporary blobs left behind"
    );
    // Overwrite the huge one with a small one; append a big piece to it.
    b.put("huge", b"tiny").unwrap();
    let tail = random_bytes(7, 20 << 20);
    assert_eq!(b.append("huge", &tail).unwrap(), 4 + tail.len() as u64);
    let got = b.get("huge").unwrap();
    assert_eq!(&got[..4], b"tiny");
    assert!(got[4..] == tail[..]);
    assert_eq!(d.status().blobs, 3);
}

#[test]
fn eight_threads_share_one_client() {
    let d = small();
    let c = d.client();
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let b = c.bucket("shared").unwrap();
                let own = c.bucket(&format!("own-{t}")).unwrap();
                for i in 0..40u64 {
                    let len = ((t * 7919 + i * 104_729) % (600 * 1024)) as usize + 1;
                    let data = random_bytes(t * 1000 + i, len);
                    let name = format!("t{t}-{i}");
                    b.put(&name, &data).unwrap();
                    own.append("log", &data[..len.min(100)]).unwrap();
                    assert!(b.get(&name).unwrap() == data, "{name}");
                    if i % 3 == 0 {
                        b.delete(&name).unwrap();
                    }
                }
                own.size_of("log").unwrap()
            })
        })
        .collect();
    let mut expect = HashSet::new();
    for (t, h) in handles.into_iter().enumerate() {
        let log = h.join().expect("thread panicked");
        assert_eq!(
            c.bucket(&format!("own-{t}"))
                .unwrap()
                .size_of("log")
                .unwrap(),
            log
        );
        for i in 0..40 {
            if i % 3 != 0 {
                expect.insert(format!("t{t}-{i}"));
            }
        }
    }
    let listed: HashSet<String> = c
        .bucket("shared")
        .unwrap()
        .list()
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(listed, expect);
}

#[test]
fn sparse_writes_far_apart_do_not_take_the_daemon_down() {
    // Many partial writes far beyond the end: each leaves a hole. Enough
    // of them exceed extents_per_blob_max and force a compaction; the
    // holes must not be materialised in memory (a 2^50-byte blob).
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("128MiB"),
        extra_yaml: "metadata:\n  extents_per_blob_max: 16\n  blob_size_max: 1PiB\n",
    });
    let c = d.client();
    let b = c.bucket("sparse").unwrap();
    let mut last = 0;
    for i in 0..40u64 {
        match b.put_at("s", (i + 1) << 44, &[i as u8 + 1; 10]) {
            Ok(size) => last = size,
            Err(e) => {
                // Refusing a write beyond a size limit is acceptable; dying is not.
                assert!(
                    matches!(
                        e.errno,
                        Errno::Range | Errno::Inval | Errno::Limit | Errno::NoSpace | Errno::TooBig
                    ),
                    "unexpected {e}; daemon log:\n{}",
                    d.log()
                );
            }
        }
    }
    // The daemon still answers and the blob reads back where it exists.
    let st = d.status();
    assert_eq!(st.clients, 1, "daemon alive; log:\n{}", d.log());
    if last > 0 {
        let mut buf = [0u8; 10];
        assert_eq!(b.get_at("s", 1 << 44, &mut buf).unwrap(), 10);
        assert_eq!(buf, [1u8; 10]);
        let mut buf = [0xFFu8; 10];
        assert_eq!(b.get_at("s", (1 << 44) + 100, &mut buf).unwrap(), 10);
        assert_eq!(buf, [0u8; 10], "hole");
    }
    // Small appends after the last hole: runs of data extents get merged
    // by compaction while the holes stay holes.
    if last > 0 {
        let mut model = Vec::new();
        for i in 0..40u8 {
            let piece = [i.wrapping_mul(3).wrapping_add(1); 7];
            assert_eq!(
                b.append("s", &piece).unwrap(),
                last + model.len() as u64 + 7
            );
            model.extend_from_slice(&piece);
        }
        let mut buf = vec![0u8; model.len() + 10];
        assert_eq!(
            b.get_at("s", last - 10, &mut buf).unwrap(),
            model.len() + 10
        );
        assert_eq!(&buf[..10], &[40u8; 10], "last sparse write");
        assert_eq!(&buf[10..], &model[..], "appended bytes after compaction");
        assert!(
            b.stat("s").unwrap().extent_count <= 2 * 40 + 2,
            "compaction merged the appended pieces"
        );
    }
    b.put("after", b"ok").unwrap();
    assert_eq!(b.get("after").unwrap(), b"ok");
}

// ---- the command line -------------------------------------------------

fn run_ok(d: &TestDaemon, args: &[&str]) -> (String, String) {
    let out = d
        .cmd()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run strata");
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "strata {args:?} failed ({}):\nstdout: {so}\nstderr: {se}",
        out.status
    );
    (so, se)
}

#[test]
fn cli_put_get_ls_rm_status() {
    let d = small();
    let src = d.path().join("in.bin");
    let data = random_bytes(42, 300_000);
    std::fs::write(&src, &data).unwrap();
    run_ok(&d, &["put", "clib", "file-a", src.to_str().unwrap()]);
    run_ok(&d, &["put", "clib", "file-b", src.to_str().unwrap()]);
    // put from stdin.
    let mut child = d
        .cmd()
        .args(["put", "clib", "from-stdin", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"piped bytes").unwrap();
    drop(child.stdin.take());
    assert!(child.wait_with_output().unwrap().status.success());

    let dst = d.path().join("out.bin");
    run_ok(&d, &["get", "clib", "file-a", dst.to_str().unwrap()]);
    assert!(std::fs::read(&dst).unwrap() == data, "get to a file");
    let out = d
        .cmd()
        .args(["get", "clib", "from-stdin"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, b"piped bytes", "get to stdout");

    let (ls, _) = run_ok(&d, &["ls"]);
    assert_eq!(ls.lines().collect::<Vec<_>>(), vec!["clib"]);
    let (ls, _) = run_ok(&d, &["ls", "clib"]);
    assert_eq!(
        ls.lines().collect::<Vec<_>>(),
        vec!["file-a", "file-b", "from-stdin"]
    );
    let (ls, _) = run_ok(&d, &["ls", "clib", "--long"]);
    assert!(
        ls.contains("BLOB") && ls.contains("SIZE"),
        "long listing has a header:\n{ls}"
    );
    let row = ls
        .lines()
        .find(|l| l.starts_with("file-a"))
        .unwrap_or_else(|| panic!("no file-a row:\n{ls}"));
    assert!(row.contains("300000"), "size column: {row}");
    let (ls, _) = run_ok(&d, &["ls", "--long"]);
    assert!(ls.contains("clib") && ls.contains('3'), "{ls}");
    let (js, _) = run_ok(&d, &["ls", "clib", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&js).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
    assert_eq!(v[0]["blob"], "file-a");
    assert_eq!(v[0]["size"], 300000);

    run_ok(&d, &["rm", "clib", "file-b"]);
    let (ls, _) = run_ok(&d, &["ls", "clib"]);
    assert_eq!(ls.lines().collect::<Vec<_>>(), vec!["file-a", "from-stdin"]);
    let out = d.cmd().args(["rm", "clib", "file-b"]).output().unwrap();
    assert!(!out.status.success(), "removing a missing blob fails");
    let out = d.cmd().args(["get", "nobucket", "x"]).output().unwrap();
    assert!(!out.status.success(), "get from a missing bucket fails");

    let (st, _) = run_ok(&d, &["status"]);
    assert!(
        st.contains("ram") && st.contains("disk"),
        "status table names the tiers:\n{st}"
    );
    let (js, _) = run_ok(&d, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&js)
        .unwrap_or_else(|e| panic!("status --json is not JSON ({e}):\n{js}"));
    assert_eq!(v["blobs"], 2);
    assert_eq!(v["buckets"], 1);
    assert_eq!(v["tiers"].as_array().unwrap().len(), 2);
    assert_eq!(v["tiers"][0]["name"], "ram");
    let parsed: strata_proto::control::StatusReply = serde_json::from_str(&js).unwrap();
    assert_eq!(parsed.blobs, 2);

    run_ok(&d, &["rm", "clib", "--bucket-too"]);
    let (ls, _) = run_ok(&d, &["ls"]);
    assert_eq!(ls.trim(), "");
}

#[test]
fn cli_status_without_daemon_fails() {
    let mut d = small();
    d.stop();
    let out = d.cmd().args(["status"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no daemon"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cli_config_check_and_default() {
    let dir = tempfile::tempdir().unwrap();
    let strata = || {
        let mut c = std::process::Command::new(common::strata_bin());
        c.env_remove("STRATA_CONFIG");
        c
    };
    // A broken file: the error names the key and its line.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "node:\n  id: 0\nplacement:\n  policy: minimize_io_time\n  lease_size: lots\n",
    )
    .unwrap();
    let out = strata()
        .args(["config", "check", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "config check of a broken file succeeded: {err}"
    );
    assert!(
        err.contains("placement.lease_size"),
        "error names the key: {err}"
    );
    assert!(err.contains('5'), "error names the line (5): {err}");
    // An unknown key.
    let bad2 = dir.path().join("bad2.yaml");
    std::fs::write(&bad2, "daemon:\n  log: info\n  sockets: /tmp/x\n").unwrap();
    let out = strata()
        .args(["config", "check", bad2.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("sockets") && err.contains('3'),
        "unknown key and line named: {err}"
    );

    // `config default` parses back with `config check`.
    let out = strata().args(["config", "default"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let def = dir.path().join("default.yaml");
    std::fs::write(&def, &out.stdout).unwrap();
    let out = strata()
        .args(["config", "check", def.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "default config does not check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn more_async_requests_than_ring_slots() {
    // One thread starts more puts than its channel has request slots
    // (ring_depth 64) and holds them all: the surplus must fail with Busy
    // (or complete), never hang.
    let d = small();
    let (tx, rx) = std::sync::mpsc::channel();
    let c = d.client();
    std::thread::spawn(move || {
        let b = c.bucket("flood").unwrap();
        let data: Vec<Vec<u8>> = (0..100)
            .map(|i| random_bytes(i, 1000 + i as usize))
            .collect();
        let mut pending = Vec::new();
        let mut busy = 0;
        for (i, d) in data.iter().enumerate() {
            match b.put_async(&format!("f{i}"), d) {
                Ok(p) => pending.push((i, p)),
                Err(e) => {
                    assert_eq!(e.errno, Errno::Busy, "{e}");
                    busy += 1;
                }
            }
        }
        let mut done = Vec::new();
        for (i, p) in pending {
            p.wait().unwrap();
            done.push(i);
        }
        for i in &done {
            assert_eq!(&b.get(&format!("f{i}")).unwrap(), &data[*i]);
        }
        // Once everything was collected, the channel is fully usable again.
        b.put("after", b"ok").unwrap();
        let _ = tx.send((done.len(), busy));
    });
    let (done, busy) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("hung with every request slot taken");
    assert_eq!(done + busy, 100);
    assert!(done >= 32, "{done} puts in flight at once");
}

/// The client's `Transport` trait path (what a transport to another node
/// is reached through) carries the whole native and file API: the same
/// workload through `connect_through_trait` reads back what the direct
/// shared-memory client wrote, and the other way round.
#[test]
fn the_transport_trait_path_carries_the_whole_api() {
    use strata_client::file::{OpenFlags, Persist};
    let d = small();
    let direct = d.client();
    let dyn_c = strata_client::Client::connect_through_trait(&d.socket).expect("connect");
    let lease = dyn_c.hello().lease_bytes as usize;
    // Blobs: small (inline or leased), one lease, larger than a lease (pieces).
    for (writer, reader, bucket) in [(&dyn_c, &direct, "via-trait"), (&direct, &dyn_c, "via-shm")] {
        let w = writer.bucket(bucket).unwrap();
        for (i, len) in [0usize, 100, 4096, lease, 3 * lease + 17]
            .into_iter()
            .enumerate()
        {
            let data = random_bytes(i as u64 + 1, len);
            w.put(&format!("k{i}"), &data).unwrap();
            let r = reader.bucket(bucket).unwrap();
            assert_eq!(r.get(&format!("k{i}")).unwrap(), data, "{bucket} k{i}");
            assert_eq!(r.stat(&format!("k{i}")).unwrap().size, len as u64);
            let mut part = vec![0u8; len.min(1000)];
            assert_eq!(
                w.get_at(&format!("k{i}"), 0, &mut part).unwrap(),
                part.len()
            );
            assert_eq!(part, data[..part.len()]);
        }
        let listed = writer.bucket(bucket).unwrap().list().unwrap();
        assert_eq!(listed.len(), 5, "{listed:?}");
        w.delete("k0").unwrap();
        assert_eq!(
            errno_of(reader.bucket(bucket).unwrap().get("k0")),
            Errno::NoBlob
        );
    }
    // Files (SCRATCH: nothing reaches the destination): written through the
    // trait path, read by the direct client, and the other way round.
    let dir = tempfile::tempdir().unwrap();
    let rw = OpenFlags {
        read: true,
        write: true,
        create: true,
        excl: false,
        trunc: true,
    };
    for (writer, reader, name) in [(&dyn_c, &direct, "a"), (&direct, &dyn_c, "b")] {
        let path = dir.path().join(name);
        let path = path.to_str().unwrap();
        let data = random_bytes(7, 3 * lease + 5);
        let f = writer
            .file_open(path, rw, 0o600, Persist::Scratch, 1 << 20)
            .unwrap();
        writer.file_write(f.id, 0, &data).unwrap();
        writer.file_sync(f.id).unwrap();
        let g = reader
            .file_open(
                path,
                OpenFlags {
                    read: true,
                    ..Default::default()
                },
                0,
                Persist::Scratch,
                1 << 20,
            )
            .unwrap();
        assert_eq!(g.id, f.id);
        let mut got = vec![0u8; data.len()];
        assert_eq!(reader.file_read(g.id, 0, &mut got).unwrap(), data.len());
        assert!(got == data, "file {name}");
        assert_eq!(reader.file_stat(g.id).unwrap().size, data.len() as u64);
        writer.file_close(f.id).unwrap();
        reader.file_close(g.id).unwrap();
    }
}
