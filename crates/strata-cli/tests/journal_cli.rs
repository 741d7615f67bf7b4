//! The journal seen from outside: data made durable survives `kill -9` of
//! the daemon, a corrupted journal record is detected and reported (never
//! applied), and a RAM-only daemon refuses a durable flush.

mod common;

use common::{TestDaemon, Tiers};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(13)
                .wrapping_add(seed)
                .wrapping_add((i >> 10) as u8)
        })
        .collect()
}

#[test]
fn durable_flush_survives_kill9_and_volatile_blobs_do_not() {
    let mut d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("256MiB"),
        extra_yaml: "",
    });
    let blobs: Vec<(String, Vec<u8>)> = (0..12)
        .map(|i| (format!("b{i}"), pattern(1000 + i * 300_000, i as u8)))
        .collect();
    {
        let c = d.client();
        let b = c.bucket("durable").unwrap();
        for (k, v) in &blobs {
            b.put(k, v).unwrap();
        }
        b.flush(true).unwrap();
        // Written after the durable flush and never flushed: in RAM, volatile.
        let v = c.bucket("volatile").unwrap();
        v.put("x", b"not durable").unwrap();
    }
    let before = d.status();
    let j = before.journal.expect("a journal with a dir tier");
    assert!(j.journal_syncs >= 1 && j.synced_seq >= 1, "{j:?}");
    d.kill9();
    d.spawn();
    let st = d.status();
    let rep = st.journal.expect("journal").replay;
    assert_eq!(
        (rep.corrupt_ranges, rep.dropped_blobs, rep.crc_mismatches),
        (0, 0, 0),
        "{rep:?}"
    );
    assert_eq!(rep.blobs, blobs.len() as u64, "{rep:?}");
    let c = d.client();
    let b = c.bucket("durable").unwrap();
    for (k, v) in &blobs {
        assert_eq!(&b.get(k).unwrap(), v, "blob {k} after kill -9");
    }
    // The bucket of the volatile blob is remembered (buckets are journaled), its RAM blob is not.
    let v = c.bucket("volatile").unwrap();
    assert!(v.get("x").is_err());
    // `strata status` shows the journal and what was replayed.
    let out = d.cmd().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("journal") && text.contains("replayed"),
        "status shows the journal:\n{text}"
    );
}

#[test]
fn a_corrupt_journal_record_is_reported_and_not_applied() {
    let mut d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("256MiB"),
        extra_yaml: "",
    });
    let first = pattern(200_000, 1);
    let second = pattern(300_000, 2);
    {
        let c = d.client();
        let b = c.bucket("k").unwrap();
        b.put("first", &first).unwrap();
        b.put("second", &second).unwrap();
        b.flush(true).unwrap();
    }
    d.kill9();
    // Flip one byte inside every record of blob "first" (its name is in the payload).
    let path = d.path().join("disk").join("strata.journal");
    let mut bytes = std::fs::read(&path).unwrap();
    let hits: Vec<usize> = bytes
        .windows(5)
        .enumerate()
        .filter(|(_, w)| *w == b"first")
        .map(|(i, _)| i)
        .collect();
    assert!(!hits.is_empty(), "a record of blob first");
    for at in hits {
        bytes[at + 2] ^= 0x20;
    }
    std::fs::write(&path, &bytes).unwrap();
    d.spawn();
    let rep = d.status().journal.expect("journal").replay;
    assert!(rep.corrupt_ranges >= 1, "{rep:?}");
    assert!(
        rep.messages.iter().any(|m| m.contains("corrupt")),
        "{rep:?}"
    );
    let c = d.client();
    let b = c.bucket("k").unwrap();
    assert!(
        b.get("first").is_err(),
        "the corrupt record was not applied"
    );
    assert_eq!(
        b.get("second").unwrap(),
        second,
        "the records after it were"
    );
    let kept = std::fs::read_dir(d.path().join("disk"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains("corrupt"));
    assert!(kept, "a copy of the corrupt journal is kept");
    let out = d.cmd().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("corrupt"),
        "status reports the corruption:\n{text}"
    );
}

#[test]
fn a_ram_only_daemon_refuses_a_durable_flush() {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml: "",
    });
    let c = d.client();
    let b = c.bucket("k").unwrap();
    b.put("x", b"y").unwrap();
    b.flush(false).unwrap();
    let e = b.flush(true).unwrap_err();
    assert_eq!(e.errno, strata_proto::Errno::NotDurable, "{e}");
    // A bucket has no destination: the message says what would help.
    let msg = e.to_string();
    assert!(
        msg.contains("bucket k") && msg.contains("kind: dir") && !msg.contains("destination"),
        "{msg}"
    );
    assert!(d.status().journal.is_none());
}

#[test]
fn workflow_files_survive_a_daemon_restart_until_staged_out() {
    use strata_client::file::{OpenFlags, Persist};
    let mut d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("256MiB"),
        extra_yaml: "",
    });
    let dest = tempfile::tempdir().unwrap();
    let path = dest.path().join("stage.dat");
    let p = path.to_str().unwrap();
    let data = pattern(3 << 20, 7);
    {
        let c = d.client();
        let fl = OpenFlags {
            read: true,
            write: true,
            create: true,
            excl: false,
            trunc: true,
        };
        let a = c
            .file_open(p, fl, 0o644, Persist::Workflow, 1 << 20)
            .unwrap();
        c.file_write(a.id, 0, &data).unwrap();
        c.file_close(a.id).unwrap();
    }
    // A clean stop: DEFAULT files drain; WORKFLOW files wait for stage-out, kept on the dir tier.
    d.stop();
    assert!(
        !path.exists(),
        "a WORKFLOW file does not reach the destination before stage-out"
    );
    d.spawn();
    let c = d.client();
    let fl = OpenFlags {
        read: true,
        write: false,
        create: false,
        excl: false,
        trunc: false,
    };
    let a = c
        .file_open(p, fl, 0, Persist::Workflow, 1 << 20)
        .expect("the WORKFLOW file is back after the restart");
    let mut back = vec![0u8; data.len()];
    assert_eq!(c.file_read(a.id, 0, &mut back).unwrap(), data.len());
    assert!(back == data, "same bytes after the restart");
    c.file_close(a.id).unwrap();
    let rep = d.status().journal.unwrap().replay;
    assert_eq!(
        (rep.files, rep.corrupt_ranges, rep.dropped_blobs),
        (1, 0, 0),
        "{rep:?}"
    );
}
