//! The get index (issue 18, target 4): small RAM blobs read straight from
//! the arena, without a request — and never a stale or mixed byte.

mod common;
mod util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{TestDaemon, Tiers};
use strata_client::Errno;
use util::errno_of;

fn requests(d: &TestDaemon) -> u64 {
    d.status().requests_total
}

/// Waits (bounded) until the daemon's harvest of direct reads shows `n`.
fn direct_reads_reach(d: &TestDaemon, n: u64) -> u64 {
    let mut seen = 0;
    // Bounded: 500 × 20 ms; the daemon harvests every 100 ms.
    for _ in 0..500 {
        seen = d.status().get_index.map_or(0, |g| g.direct_reads_total);
        if seen >= n {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    seen
}

#[test]
fn small_blobs_are_read_without_a_request_and_every_change_is_seen() {
    let d = TestDaemon::small();
    let c = d.client();
    let b = c.bucket("ix").unwrap();
    let v1: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    b.put("k", &v1).unwrap();
    assert_eq!(b.get("k").unwrap(), v1);

    // 1000 gets: served from the index, not as requests.
    let before = requests(&d);
    let mut buf = vec![0u8; 2048];
    for _ in 0..1000 {
        assert_eq!(b.get_at("k", 0, &mut buf).unwrap(), 1024);
        assert_eq!(&buf[..1024], &v1[..]);
    }
    let asked = requests(&d) - before;
    assert!(
        asked < 50,
        "{asked} requests for 1000 gets of an indexed blob"
    );
    let st = d.status().get_index.expect("the index is on by default");
    assert!(st.published >= 1 && st.entries >= 65536, "{st:?}");
    assert!(direct_reads_reach(&d, 1000) >= 1000);
    // They count as accesses for the organizer.
    assert!(b.stat("k").unwrap().access_count >= 1000);

    // Every kind of change is seen by the next get.
    let v2 = vec![7u8; 3000];
    b.put("k", &v2).unwrap();
    assert_eq!(b.get("k").unwrap(), v2, "replaced with another size");
    b.put_at("k", 10, b"INPLACE").unwrap();
    let mut want = v2.clone();
    want[10..17].copy_from_slice(b"INPLACE");
    assert_eq!(b.get("k").unwrap(), want, "written in place");
    let mut part = [0u8; 7];
    assert_eq!(b.get_at("k", 10, &mut part).unwrap(), 7);
    assert_eq!(&part, b"INPLACE");
    b.append("k", b"tail").unwrap();
    want.extend_from_slice(b"tail");
    assert_eq!(b.get("k").unwrap(), want, "appended");
    assert_eq!(b.get_at("k", want.len() as u64 - 2, &mut part).unwrap(), 2);

    b.rename_blob("k", "k2", false).unwrap();
    assert_eq!(errno_of(b.get("k")), Errno::NoBlob, "renamed away");
    assert_eq!(b.get("k2").unwrap(), want);
    b.put("k3", b"three").unwrap();
    assert_eq!(b.get("k3").unwrap(), b"three");
    b.rename_blob("k3", "k2", true).unwrap();
    assert_eq!(b.get("k2").unwrap(), b"three", "replaced by a rename");
    assert_eq!(errno_of(b.get("k3")), Errno::NoBlob);
    b.delete("k2").unwrap();
    assert_eq!(errno_of(b.get("k2")), Errno::NoBlob, "deleted");
    assert_eq!(errno_of(b.get_at("k2", 0, &mut buf)), Errno::NoBlob);

    // A bucket destroyed and made again under the same name: nothing of
    // the old one is read.
    b.put("gone", b"old bytes").unwrap();
    assert_eq!(b.get("gone").unwrap(), b"old bytes");
    b.destroy().unwrap();
    let again = c.bucket("ix").unwrap();
    assert_eq!(errno_of(again.get("gone")), Errno::NoBlob);
    assert!(b.get("gone").is_err(), "a get on a destroyed bucket fails");
}

#[test]
fn with_the_index_off_every_get_is_a_request() {
    let d = TestDaemon::configured(Tiers {
        ram: "64MiB",
        disk: None,
        extra_yaml: "",
    });
    let yaml = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        yaml.replacen("  log: warn\n", "  log: warn\n  get_index: 0\n", 1),
    )
    .unwrap();
    let mut d = d;
    d.spawn();
    assert!(d.status().get_index.is_none());
    let b = d.client().bucket("ix").unwrap();
    b.put("k", &[1u8; 1024]).unwrap();
    let before = requests(&d);
    let mut buf = [0u8; 1024];
    for _ in 0..200 {
        b.get_at("k", 0, &mut buf).unwrap();
    }
    assert!(requests(&d) - before >= 200, "every get asked the daemon");
}

/// A writer replaces blobs (every byte of one version
/// equal, a version per round, sizes changing so extents move) while
/// readers in other threads get them: a reader sees one whole version or
/// NoBlob, never a mix, never bytes of another blob.
#[test]
fn concurrent_readers_never_see_a_mix_of_two_versions() {
    let d = TestDaemon::small();
    let c = d.client();
    let b = c.bucket("race").unwrap();
    const KEYS: u32 = 8;
    for k in 0..KEYS {
        b.put(&format!("k{k}"), &vec![(k * 16) as u8; 512]).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for t in 0..2u32 {
        let (c, stop) = (c.clone(), stop.clone());
        readers.push(std::thread::spawn(move || {
            let b = c.bucket("race").unwrap();
            let mut buf = vec![0u8; 8192];
            let (mut whole, mut missing) = (0u64, 0u64);
            let mut i = t;
            // Bounded by the writer (it sets stop after its rounds).
            while !stop.load(Ordering::Relaxed) {
                let k = i % KEYS;
                i += 1;
                match b.get_at(&format!("k{k}"), 0, &mut buf) {
                    Ok(n) => {
                        let got = &buf[..n];
                        let first = got[0];
                        assert_eq!(first / 16, k as u8, "bytes of another blob in k{k}");
                        assert!(got.iter().all(|&x| x == first), "k{k}: a mix of versions");
                        whole += 1;
                    }
                    Err(e) if e.errno == Errno::NoBlob => missing += 1,
                    Err(e) => panic!("get k{k}: {e}"),
                }
            }
            (whole, missing)
        }));
    }
    for round in 1..3000u32 {
        let k = round % KEYS;
        let name = format!("k{k}");
        let v = (k * 16 + round % 16) as u8;
        match round % 4 {
            // Another size: a new extent, the old one freed and reused.
            0 | 1 => b
                .put(&name, &vec![v; 256 + (round as usize * 97) % 4000])
                .unwrap(),
            // Replaced at the same size (a new extent all the same; a
            // rewrite in place may be read torn, as a read racing a write).
            2 => {
                let n = b.size_of(&name).unwrap() as usize;
                b.put(&name, &vec![v; n]).unwrap();
            }
            // Gone for a moment, then back.
            _ => {
                b.delete(&name).unwrap();
                b.put(&name, &vec![v; 700]).unwrap();
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut whole = 0;
    for r in readers {
        whole += r.join().unwrap().0;
    }
    assert!(whole > 0);
    assert!(
        direct_reads_reach(&d, 1) >= 1,
        "some gets went through the index"
    );
}

/// The organizer moves an indexed blob off RAM and other blobs take the
/// RAM it left: its entry is gone (every get asks the daemon) and every get
/// reads its bytes. With `forget` a no-op this fails.
#[test]
fn a_blob_the_organizer_moves_off_ram_loses_its_entry_and_reads_right() {
    const RAM_MASK: u32 = 1;
    const DISK_MASK: u32 = 2;
    let d = TestDaemon::start_with(Tiers {
        ram: "8MiB",
        disk: Some("128MiB"),
        extra_yaml: "organizer:\n  enabled: true\n  interval: 20ms\n  bandwidth_max: 256MiB/s\n  recency_window: 300ms\n  frequency_window: 2s\n",
    });
    let b = d.client().bucket("org").unwrap();
    let a: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    b.put("a", &a).unwrap();
    assert_eq!(b.stat("a").unwrap().tier_mask, RAM_MASK);
    let mut buf = vec![0u8; a.len()];
    assert_eq!(b.get_at("a", 0, &mut buf).unwrap(), a.len());
    assert!(d.status().get_index.unwrap().published >= 1, "a is indexed");
    // Others fill RAM past its high water; "a" is the coldest.
    b.set_score("a", Some(0.0), false).unwrap();
    for i in 0..7u8 {
        let name = format!("f{i}");
        b.put(&name, &vec![0xF0 | i; 1_000_000]).unwrap();
        b.set_score(&name, Some(1.0), true).unwrap();
    }
    // Bounded: the organizer runs every 20 ms; GUARD-long at most.
    let started = std::time::Instant::now();
    loop {
        assert_eq!(b.get_at("a", 0, &mut buf).unwrap(), a.len());
        assert!(buf == a, "a read wrong while the organizer moved it");
        if b.stat("a").unwrap().tier_mask == DISK_MASK {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the organizer did not move a off RAM: {:?}\n{}",
            b.stat("a").unwrap(),
            d.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The RAM it left is written by new blobs until RAM is full, then
    // "a" is read again.
    for i in 0..64u8 {
        let name = format!("g{i}");
        b.put(&name, &vec![0xE0 | (i & 15); 256 << 10]).unwrap();
        if b.stat(&name).unwrap().tier_mask != RAM_MASK {
            break;
        }
    }
    assert_eq!(b.get("a").unwrap(), a);
    assert_eq!(b.get_at("a", 0, &mut buf).unwrap(), a.len());
    assert!(buf == a);
    // Off RAM, "a" has no entry: every get of it asks the daemon (an entry
    // left behind would answer from the place it left).
    let before = requests(&d);
    for _ in 0..20 {
        assert_eq!(b.get_at("a", 0, &mut buf).unwrap(), a.len());
    }
    assert!(
        requests(&d) - before >= 20,
        "gets of a blob on disk went through an old entry"
    );
}
