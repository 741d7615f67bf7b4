//! Issue 12 item 6: a sparse native blob never fills a tier. Holes stay
//! holes through a durable flush (the stash), sizes have a configured
//! maximum, a get too large for the process is an error (it aborted), and
//! space freed on a dir tier goes back to the file system.

use std::os::unix::fs::MetadataExt;

mod common;
use common::{TestDaemon, Tiers};

/// Bytes the tier data file really occupies on disk.
fn allocated_bytes(d: &TestDaemon) -> u64 {
    std::fs::metadata(d.path().join("disk/strata-tier.data"))
        .unwrap()
        .blocks()
        * 512
}

#[test]
fn a_sparse_blob_stays_sparse_on_a_durable_flush() {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("128MiB"),
        extra_yaml: "",
    });
    let b = d.client().bucket("b").unwrap();
    let far = 1u64 << 39;
    assert_eq!(b.put_at("x", far, b"x").unwrap(), far + 1);
    b.put_at("x", 4096, b"early").unwrap();
    b.flush(true).expect("durable flush of a sparse blob");
    assert!(
        allocated_bytes(&d) < 16 << 20,
        "the hole was materialised: {} bytes on disk",
        allocated_bytes(&d)
    );
    let mut buf = [9u8; 8];
    assert_eq!(b.get_at("x", far - 4, &mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"\0\0\0\0x");
    assert_eq!(b.get_at("x", 4094, &mut buf).unwrap(), 8);
    assert_eq!(&buf, b"\0\0early\0");
    let st = d.status();
    assert!(
        st.tiers.iter().all(|t| t.used_bytes <= t.capacity_bytes),
        "{:?}",
        st.tiers
    );
}

#[test]
fn sizes_have_a_configured_maximum_and_a_huge_get_is_an_error() {
    let d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("128MiB"),
        extra_yaml: "metadata:\n  blob_size_max: 1TiB\n",
    });
    let b = d.client().bucket("b").unwrap();
    let e = b.put_at("x", 1 << 62, b"x").unwrap_err();
    assert_eq!(e.errno, strata_proto::Errno::TooBig, "{e}");
    assert!(!b.exists("x").unwrap(), "a refused put creates nothing");
    assert_eq!(b.put_at("y", (1 << 40) - 1, b"y").unwrap(), 1 << 40);
    let e = b.put_at("y", 1 << 40, b"z").unwrap_err();
    assert_eq!(e.errno, strata_proto::Errno::TooBig, "{e}");
    // 1 TiB does not fit in this process: an error, not an abort.
    let e = b.get("y").unwrap_err();
    assert_eq!(e.errno, strata_proto::Errno::TooBig, "{e}");
    assert!(e.to_string().contains("get_at"), "{e}");
}

#[test]
/// A dir tier keeps the blocks of freed extents while it runs (the next
/// extents overwrite written blocks: no allocation on the fsync path), its
/// allocator counts them free, and a clean stop returns them to the file
/// system.
fn freed_dir_tier_space_is_reused_and_returns_to_the_file_system_at_stop() {
    let mut d = TestDaemon::start_with(Tiers {
        ram: "64MiB",
        disk: Some("256MiB"),
        extra_yaml: "",
    });
    let b = d.client().bucket("b").unwrap();
    let data = vec![7u8; 8 << 20];
    for i in 0..8 {
        b.put(&format!("x{i}"), &data).unwrap();
    }
    // Durable: the blobs move onto the dir tier.
    b.flush(true).unwrap();
    let full = allocated_bytes(&d);
    assert!(
        full >= 60 << 20,
        "the blobs were not stashed on the dir tier ({full} bytes)"
    );
    for i in 0..8 {
        b.delete(&format!("x{i}")).unwrap();
    }
    // Frees are applied by the poller once the journal recording them is
    // durable (until then they are quarantined: `used_bytes` no longer counts
    // them, but the allocator cannot hand them out yet). Wait for both
    // (bounded).
    let disk_used = |d: &TestDaemon| {
        let s = d.status();
        let used = s
            .tiers
            .iter()
            .find(|t| t.kind == "dir")
            .map(|t| t.used_bytes)
            .unwrap();
        used + s.journal.as_ref().map_or(0, |j| j.quarantined_bytes)
    };
    let t = std::time::Instant::now();
    while disk_used(&d) > 0 && t.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(disk_used(&d), 0, "every blob is gone");
    // Written again: the same blocks, the file does not grow.
    for i in 0..8 {
        b.put(&format!("y{i}"), &data).unwrap();
    }
    b.flush(true).unwrap();
    assert!(
        allocated_bytes(&d) <= full + (4 << 20),
        "{} bytes allocated after a second fill (first {full})",
        allocated_bytes(&d)
    );
    for i in 0..8 {
        b.delete(&format!("y{i}")).unwrap();
    }
    let t = std::time::Instant::now();
    while disk_used(&d) > 0 && t.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    d.stop();
    assert!(
        allocated_bytes(&d) <= 4 << 20,
        "{} bytes still allocated after a clean stop (was {full})",
        allocated_bytes(&d)
    );
}
