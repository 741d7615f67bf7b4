//! The buffer organizer seen from outside, on a real daemon: a hot blob on
//! the dir tier is promoted to RAM and a cold one in RAM demoted to the dir
//! tier, bytes identical; `strata ls --long` and `strata status` show it; a
//! fsync'ed blob promoted to RAM survives `kill -9`; `organizer.enabled:
//! false` turns it off. No timed assertions: tests poll `stat` until the
//! tier mask changes, with a generous guard.

mod common;

use std::time::{Duration, Instant};

use common::{TestDaemon, Tiers};

const GUARD: Duration = Duration::from_secs(300);
const RAM: u32 = 0b01;
const DISK: u32 = 0b10;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(29)
                .wrapping_add(seed)
                .wrapping_add((i >> 11) as u8)
        })
        .collect()
}

/// Short score windows and a fast interval so the test needs no long waits.
const ORGANIZER_YAML: &str = "organizer:\n  enabled: true\n  interval: 20ms\n  bandwidth_max: 256MiB/s\n  recency_window: 300ms\n  frequency_window: 2s\n";

fn daemon() -> TestDaemon {
    TestDaemon::start_with(Tiers {
        ram: "8MiB",
        disk: Some("128MiB"),
        extra_yaml: ORGANIZER_YAML,
    })
}

#[test]
fn hot_blob_promoted_cold_blob_demoted_bytes_identical() {
    let d = daemon();
    let c = d.client();
    let b = c.bucket("org").unwrap();
    let cold = pattern(5 << 20, 1);
    let hot = pattern((5 << 20) + 4321, 2);
    b.put("cold", &cold).unwrap();
    b.put("hot", &hot).unwrap();
    assert_eq!(
        b.stat("cold").unwrap().tier_mask,
        RAM,
        "the first blob fits in RAM"
    );
    assert_eq!(
        b.stat("hot").unwrap().tier_mask,
        DISK,
        "the second does not"
    );
    // Keep reading the hot blob (it stays hot); the cold one is never touched.
    let start = Instant::now();
    loop {
        assert_eq!(b.get("hot").unwrap(), hot);
        let (h, k) = (b.stat("hot").unwrap(), b.stat("cold").unwrap());
        if h.tier_mask == RAM && k.tier_mask == DISK {
            assert!(h.score >= 0.7, "hot score {}", h.score);
            break;
        }
        assert!(
            start.elapsed() < GUARD,
            "organizer did not swap the blobs: hot {h:?} cold {k:?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(b.get("hot").unwrap(), hot);
    assert_eq!(b.get("cold").unwrap(), cold);
    let o = d.status().organizer.expect("organizer status");
    assert!(
        o.enabled && o.promoted_blobs >= 1 && o.demoted_blobs >= 1,
        "{o:?}"
    );
    assert!(
        o.promoted_bytes >= hot.len() as u64 && o.demoted_bytes >= cold.len() as u64,
        "{o:?}"
    );
    assert_eq!(o.failed_moves, 0, "{o:?}");
    assert!(
        o.tier_scores.len() == 2 && o.tier_scores[0] == 1.0 && o.tier_scores[1] < 1.0,
        "{o:?}"
    );

    // What a user sees.
    let out = d.cmd().args(["ls", "--long", "org"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let head: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        [
            "BLOB",
            "SIZE",
            "TIERS",
            "SCORE",
            "USER",
            "STATIONARY",
            "DIRTY",
            "ACCESSES"
        ],
        "{text}"
    );
    let row = |n: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(n))
            .unwrap_or_else(|| panic!("{n} in {text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("hot")[2], "ram", "{text}");
    assert_eq!(row("cold")[2], "disk", "{text}");
    assert_eq!(row("cold")[4..6], ["-", "no"], "{text}");
    let out = d.cmd().args(["ls", "--json", "org"]).output().unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hot_row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["blob"] == "hot")
        .unwrap();
    assert_eq!(hot_row["tiers"], serde_json::json!(["ram"]));
    assert_eq!(hot_row["stationary"], false);
    let out = d.cmd().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("organizer  promoted ")),
        "{text}"
    );
}

#[test]
fn stationary_blob_stays_and_user_score_shows_in_ls() {
    let d = daemon();
    let c = d.client();
    let b = c.bucket("pin").unwrap();
    b.put("filler", &pattern(7 << 20, 3)).unwrap();
    b.put("still", &pattern(3 << 20, 4)).unwrap();
    b.put("moving", &pattern(3 << 20, 5)).unwrap();
    b.delete("filler").unwrap();
    assert_eq!(b.stat("still").unwrap().tier_mask, DISK);
    assert_eq!(b.stat("moving").unwrap().tier_mask, DISK);
    b.set_score("still", Some(1.0), true).unwrap();
    // Both are read alike; only the one that may move does.
    let start = Instant::now();
    while b.stat("moving").unwrap().tier_mask != RAM {
        b.get("still").unwrap();
        b.get("moving").unwrap();
        assert!(start.elapsed() < GUARD, "not promoted\n{}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        b.stat("still").unwrap().tier_mask,
        DISK,
        "a stationary blob is never moved"
    );
    let out = d.cmd().args(["ls", "-l", "pin"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let still: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("still"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        (still[2], still[3], still[4], still[5]),
        ("disk", "1.000", "1.000", "yes"),
        "{text}"
    );
}

#[test]
fn fsynced_blob_promoted_to_ram_survives_kill9() {
    let mut d = daemon();
    let data = pattern((3 << 20) + 17, 7);
    {
        let c = d.client();
        let b = c.bucket("durable").unwrap();
        b.put("k", &data).unwrap();
        b.flush(true).unwrap();
        assert_eq!(
            b.stat("k").unwrap().tier_mask,
            DISK,
            "a durable flush puts it on the dir tier"
        );
        let start = Instant::now();
        while b.stat("k").unwrap().tier_mask != RAM {
            assert_eq!(b.get("k").unwrap(), data);
            assert!(start.elapsed() < GUARD, "not promoted\n{}", d.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    d.kill9();
    d.spawn();
    let c = d.client();
    let b = c.bucket("durable").unwrap();
    assert_eq!(
        b.get("k").unwrap(),
        data,
        "the fsync'ed version is back from its journal record"
    );
    let rep = d.status().journal.expect("journal").replay;
    assert_eq!(
        (rep.corrupt_ranges, rep.dropped_blobs, rep.crc_mismatches),
        (0, 0, 0),
        "{rep:?}"
    );
}

#[test]
fn organizer_can_be_turned_off() {
    let d = TestDaemon::start_with(Tiers {
        ram: "8MiB",
        disk: Some("128MiB"),
        extra_yaml: "organizer:\n  enabled: false\n",
    });
    let o = d.status().organizer.expect("organizer status");
    assert!(!o.enabled, "{o:?}");
    let out = d.cmd().arg("status").output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("organizer  off"),
        "{out:?}"
    );
}
