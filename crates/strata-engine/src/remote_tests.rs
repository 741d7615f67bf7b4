//! Remote tiers in the engine, with an in-memory stand-in for the donor's
//! link (the real one, over TCP, is tested in strata-net and in the
//! cluster tests): node-local first, spill onto remote tiers, fallback when
//! the donor fails, loss reported and cleaned, file pages never remote.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use strata_alloc::ExtentAllocator;
use strata_meta::BucketId;
use strata_proto::types::TIER_HOLE;

use crate::core::Core;
use crate::testutil::{fixture, pattern, via_lease, Fixture};
use crate::tier::{Local, RemoteLink, Tier, TierBackend};

/// Memory "another node" lends: a byte vector, with switches for failure and loss.
#[derive(Default)]
struct Lent {
    mem: Mutex<Vec<u8>>,
    failing: AtomicBool,
    /// Writes fail while the link still looks usable (a reset mid-call).
    writes_fail: AtomicBool,
    lost: AtomicBool,
    lost_taken: AtomicBool,
    attach_allowed: AtomicU32,
}

impl TierBackend for Lent {
    fn read_at(&self, off: u64, dst: &mut [u8]) -> std::io::Result<()> {
        if self.failing.load(Ordering::SeqCst) || self.lost.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("donor down"));
        }
        let m = self.mem.lock().unwrap();
        dst.copy_from_slice(&m[off as usize..off as usize + dst.len()]);
        Ok(())
    }
    fn write_at(&self, off: u64, src: &[u8]) -> std::io::Result<()> {
        if self.writes_fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("connection reset"));
        }
        if self.failing.load(Ordering::SeqCst) || self.lost.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("donor down"));
        }
        let mut m = self.mem.lock().unwrap();
        let end = off as usize + src.len();
        if m.len() < end {
            m.resize(end, 0);
        }
        m[off as usize..end].copy_from_slice(src);
        Ok(())
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn len_bytes(&self) -> std::io::Result<u64> {
        Ok(REMOTE_BYTES)
    }
    fn release(&self, _off: u64, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn mapped(&self, _off: u64, _len: u64) -> Option<&[u8]> {
        None
    }
    fn local(&self) -> Local {
        Local::Remote { node: 1 }
    }
}

impl RemoteLink for Lent {
    fn node(&self) -> u32 {
        1
    }
    fn epoch(&self) -> u32 {
        if self.lost.load(Ordering::SeqCst) {
            0
        } else {
            7
        }
    }
    fn usable(&self) -> bool {
        !self.failing.load(Ordering::SeqCst) && !self.lost.load(Ordering::SeqCst)
    }
    fn granted_bytes(&self) -> u64 {
        REMOTE_BYTES
    }
    fn take_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst) && !self.lost_taken.swap(true, Ordering::SeqCst)
    }
    fn allow_attach(&self) {
        if self.lost_taken.load(Ordering::SeqCst) {
            self.attach_allowed.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn measured(&self) -> Option<(f64, f64)> {
        Some((900.0, 55.0))
    }
}

const REMOTE_BYTES: u64 = 8 << 20;

/// RAM 1 MiB, disk 2 MiB, and a remote tier of 8 MiB lent by node 1.
fn with_remote() -> (Fixture, Arc<Lent>) {
    let mut f = fixture(1 << 20, 2 << 20, 8 << 20);
    let lent = Arc::new(Lent::default());
    f.core.tiers.tiers.push(Tier {
        index: 2,
        name: "remote:n2".into(),
        backend: lent.clone(),
        lock: None,
        alloc: Some(ExtentAllocator::new(REMOTE_BYTES, 4096)),
        capacity_bytes: REMOTE_BYTES,
        block_bytes: 4096,
        bandwidth_mib_s: 1000.0,
        latency_us: 100.0,
        volatile: true,
        blob_bytes: 0,
        blob_extents: 0,
        remote: Some(lent.clone()),
        lost_blobs: 0,
    });
    (f, lent)
}

fn put(core: &mut Core, b: BucketId, name: &str, data: &[u8]) {
    via_lease(core, data, |c, src, taken| {
        c.put(b, name, src, taken, None, false)
    })
    .unwrap();
}

fn read_all(core: &mut Core, b: BucketId, name: &str) -> strata_proto::Result<Vec<u8>> {
    let mut ex = Vec::new();
    let (size, covered, pin) = core.get((1, 0), b, name, 0, u64::MAX, &mut ex, 1024)?;
    assert_eq!(size, covered);
    let mut out = vec![0u8; size as usize];
    for e in ex {
        let d = &mut out[e.logical_off as usize..(e.logical_off + e.len) as usize];
        if e.tier != TIER_HOLE {
            if e.tier == 2 {
                // The donor refuses epoch 0 (no donation has it): what a lost one reads as.
                if e.epoch == 0 {
                    core.unpin((1, 0), pin);
                    return Err(strata_proto::Errno::Io);
                }
                assert_eq!(e.epoch, 7, "remote extents name their donation's epoch");
            } else {
                assert_eq!(e.epoch, 0);
            }
            core.tiers.read(e.tier as usize, e.phys_off, d)?;
        }
    }
    core.unpin((1, 0), pin);
    Ok(out)
}

fn tiers_of(core: &Core, b: BucketId, name: &str) -> Vec<u32> {
    let id = core.meta.blob_lookup(b, name).unwrap();
    let mut t: Vec<u32> = core
        .meta
        .blob(id)
        .unwrap()
        .extents
        .iter()
        .filter(|e| !e.is_hole())
        .map(|e| e.tier)
        .collect();
    t.dedup();
    t
}

#[test]
fn local_tiers_fill_first_then_remote_then_the_last_local_tier_grows() {
    let (mut f, _lent) = with_remote();
    let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
    let mut all = Vec::new();
    for i in 0..20u8 {
        let data = pattern(700_000, i);
        put(&mut f.core, b, &format!("k{i}"), &data);
        all.push(data);
        // Nothing is remote while the local tiers have room.
        let local_used = f.core.tiers.tiers[0].blob_bytes + f.core.tiers.tiers[1].blob_bytes;
        if f.core.tiers.tiers[2].blob_bytes > 0 {
            assert!(
                local_used + 700_000 > (3 << 20) - (64 << 10),
                "remote used while the local tiers had room ({local_used} used)"
            );
        }
    }
    assert!(
        f.core.tiers.tiers[2].blob_bytes > 0,
        "spilled onto the remote tier"
    );
    assert!(
        f.core.tiers.tiers[2].blob_bytes <= REMOTE_BYTES,
        "the remote tier never grows past the grant"
    );
    assert!(
        f.core.tiers.spilled_bytes(1) > 0,
        "when the remote tier is full too, the last local tier grows"
    );
    for (i, d) in all.iter().enumerate() {
        assert_eq!(&read_all(&mut f.core, b, &format!("k{i}")).unwrap(), d);
    }
    f.core.check().unwrap();
}

#[test]
fn a_donor_known_down_is_skipped_by_placement() {
    let (mut f, lent) = with_remote();
    let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
    for i in 0..4u8 {
        put(&mut f.core, b, &format!("fill{i}"), &pattern(700_000, i));
    }
    // Not usable (down, failed lately): the last local tier grows instead.
    lent.failing.store(true, Ordering::SeqCst);
    let data = pattern(900_000, 9);
    put(&mut f.core, b, "late", &data);
    assert!(!tiers_of(&f.core, b, "late").contains(&2));
    lent.failing.store(false, Ordering::SeqCst);
    assert_eq!(read_all(&mut f.core, b, "late").unwrap(), data);
    f.core.check().unwrap();
}

#[test]
fn a_failed_remote_write_falls_back_to_the_last_local_tier() {
    let (mut f, lent) = with_remote();
    let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
    for i in 0..4u8 {
        put(&mut f.core, b, &format!("fill{i}"), &pattern(700_000, i));
    }
    // Usable as far as placement knows, but every write fails.
    lent.writes_fail.store(true, Ordering::SeqCst);
    let data = pattern(900_000, 5);
    put(&mut f.core, b, "k", &data);
    assert!(!tiers_of(&f.core, b, "k").contains(&2));
    assert_eq!(
        f.core.tiers.tiers[2].blob_bytes, 0,
        "the failed piece's space is freed"
    );
    assert_eq!(read_all(&mut f.core, b, "k").unwrap(), data);
    f.core.check().unwrap();
}

#[test]
fn a_lost_donation_drops_its_blobs_reports_them_and_then_attaches_anew() {
    let (mut f, lent) = with_remote();
    let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
    for i in 0..6u8 {
        put(&mut f.core, b, &format!("k{i}"), &pattern(700_000, i));
    }
    let on_remote: Vec<String> = (0..6)
        .map(|i| format!("k{i}"))
        .filter(|n| tiers_of(&f.core, b, n).contains(&2))
        .collect();
    assert!(!on_remote.is_empty());
    lent.lost.store(true, Ordering::SeqCst);
    // A reader meanwhile gets an error, never zeros.
    assert!(read_all(&mut f.core, b, &on_remote[0]).is_err());
    f.core.tiers.remote_due_ns = 0;
    crate::remote::tend(&mut f.core);
    for n in &on_remote {
        assert!(f.core.meta.blob_lookup(b, n).is_err(), "{n} dropped");
    }
    assert_eq!(f.core.tiers.tiers[2].lost_blobs, on_remote.len() as u64);
    assert_eq!(f.core.tiers.tiers[2].blob_bytes, 0);
    assert!(lent.attach_allowed.load(Ordering::SeqCst) > 0);
    // Blobs wholly on this node are untouched.
    for i in 0..6u8 {
        let n = format!("k{i}");
        if !on_remote.contains(&n) {
            assert_eq!(read_all(&mut f.core, b, &n).unwrap(), pattern(700_000, i));
        }
    }
    // The measured link replaces the assumed figures.
    assert_eq!(f.core.tiers.tiers[2].bandwidth_mib_s, 900.0);
    assert_eq!(f.core.tiers.tiers[2].latency_us, 55.0);
    f.core.check().unwrap();
}

#[test]
fn file_pages_never_go_to_a_remote_tier() {
    let (mut f, _lent) = with_remote();
    let (b, _) = f.core.meta.bucket_open("/f", true, false, 0).unwrap();
    f.core
        .meta
        .file_attach(
            b,
            strata_meta::FileRecord::new(strata_meta::Persist::Default, 16, 0o644, 0),
        )
        .unwrap();
    for i in 0..10u8 {
        put(
            &mut f.core,
            b,
            &strata_meta::page_name(i as u64),
            &pattern(700_000, i),
        );
        assert!(!tiers_of(&f.core, b, &strata_meta::page_name(i as u64)).contains(&2));
    }
    assert_eq!(f.core.tiers.tiers[2].blob_bytes, 0);
}

#[test]
fn reads_in_a_row_from_one_node_ask_for_a_move_toward_it_once() {
    use crate::remote::{note_read, Locality, LOCALITY_READS_MIN};
    let (mut f, _lent) = with_remote();
    let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
    put(&mut f.core, b, "big", &pattern(300_000, 1));
    put(&mut f.core, b, "small", &pattern(1000, 2));
    let big = f.core.meta.blob_lookup(b, "big").unwrap();
    let small = f.core.meta.blob_lookup(b, "small").unwrap();
    let mut loc = Locality::default();
    assert_eq!(
        (0..10).find_map(|_| note_read(&f.core, &mut loc, 1, big)),
        None,
        "off by default"
    );
    loc.enabled = true;
    // A node that lends nothing here: never.
    assert_eq!(note_read(&f.core, &mut loc, 5, big), None);
    // Small blobs stay.
    for _ in 0..10 {
        assert_eq!(note_read(&f.core, &mut loc, 1, small), None);
    }
    // Another reader in between starts the count over.
    for _ in 1..LOCALITY_READS_MIN {
        assert_eq!(note_read(&f.core, &mut loc, 1, big), None);
    }
    assert_eq!(note_read(&f.core, &mut loc, 2, big), None);
    for _ in 1..LOCALITY_READS_MIN {
        assert_eq!(note_read(&f.core, &mut loc, 1, big), None);
    }
    assert_eq!(
        note_read(&f.core, &mut loc, 1, big),
        Some(2),
        "due: tier 2 is node 1's"
    );
    // Not again within the interval, however often it is read.
    for _ in 0..10 {
        assert_eq!(note_read(&f.core, &mut loc, 1, big), None);
    }
}
