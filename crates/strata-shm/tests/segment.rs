use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use strata_shm::{futex, ShmSegment, WaitResult};

fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "strata-shm-test-{}-{}-{}",
        std::process::id(),
        tag,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Unlinks the name when the test ends (also on panic).
struct Cleanup(String);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = ShmSegment::unlink(&self.0);
    }
}

#[test]
fn create_open_unlink() {
    let name = unique("basic");
    let _c = Cleanup(name.clone());
    let seg = ShmSegment::create(&name, 10_000).unwrap();
    assert_eq!(seg.name(), name);
    assert_eq!(seg.len(), 10_000);
    assert_eq!(seg.as_ptr() as usize % 4096, 0);

    let meta = std::fs::metadata(format!("/dev/shm/{name}")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 10_000);

    // Zero-filled, and writes are visible through a second mapping.
    // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
    let w = unsafe { &*(seg.as_ptr().add(64) as *const AtomicU64) };
    assert_eq!(w.load(Ordering::SeqCst), 0);
    w.store(0x0123_4567_89ab_cdef, Ordering::SeqCst);
    // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
    let last = unsafe { &*(seg.as_ptr().add(9_992) as *const AtomicU64) };
    last.store(42, Ordering::SeqCst);

    let other = ShmSegment::open(&name).unwrap();
    assert_eq!(other.len(), 10_000);
    assert_ne!(other.as_ptr(), seg.as_ptr());
    // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
    let w2 = unsafe { &*(other.as_ptr().add(64) as *const AtomicU64) };
    assert_eq!(w2.load(Ordering::SeqCst), 0x0123_4567_89ab_cdef);
    assert_eq!(
        // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
        unsafe { &*(other.as_ptr().add(9_992) as *const AtomicU64) }.load(Ordering::SeqCst),
        42
    );
    w2.store(7, Ordering::SeqCst);
    assert_eq!(w.load(Ordering::SeqCst), 7);

    // Creating again fails.
    assert_eq!(
        ShmSegment::create(&name, 10_000).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );

    // populate never changes contents.
    seg.populate(0..seg.len());
    seg.populate(5000..1_000_000);
    seg.populate(std::ops::Range { start: 20, end: 10 });
    assert_eq!(w.load(Ordering::SeqCst), 7);
    assert_eq!(last.load(Ordering::SeqCst), 42);

    ShmSegment::unlink(&name).unwrap();
    assert!(!std::path::Path::new(&format!("/dev/shm/{name}")).exists());
    assert_eq!(
        ShmSegment::open(&name).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        ShmSegment::unlink(&name).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Existing mappings stay valid after unlink.
    assert_eq!(w2.load(Ordering::SeqCst), 7);
}

#[test]
fn create_or_replace_replaces() {
    let name = unique("replace");
    let _c = Cleanup(name.clone());
    let a = ShmSegment::create_or_replace(&name, 4096).unwrap();
    // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
    unsafe { &*(a.as_ptr() as *const AtomicU64) }.store(9, Ordering::SeqCst);
    let b = ShmSegment::create_or_replace(&name, 8192).unwrap();
    assert_eq!(b.len(), 8192);
    assert_eq!(
        // SAFETY: test: the offset lies inside the live mapping/buffer and is aligned for the atomic; any bits are a valid atomic.
        unsafe { &*(b.as_ptr() as *const AtomicU64) }.load(Ordering::SeqCst),
        0
    );
    assert_eq!(ShmSegment::open(&name).unwrap().len(), 8192);
}

#[test]
fn invalid_names_and_sizes_rejected() {
    let long = "a".repeat(256);
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "/abc",
        "abc/",
        "sp ace",
        "nul\0x",
        "é",
        long.as_str(),
    ] {
        assert_eq!(
            ShmSegment::create(bad, 4096).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{bad:?}"
        );
        assert_eq!(
            ShmSegment::open(bad).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{bad:?}"
        );
        assert_eq!(
            ShmSegment::unlink(bad).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{bad:?}"
        );
        assert_eq!(
            ShmSegment::create_or_replace(bad, 4096).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
    let name = unique("zero");
    let _c = Cleanup(name.clone());
    assert_eq!(
        ShmSegment::create(&name, 0).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert!(!std::path::Path::new(&format!("/dev/shm/{name}")).exists());
    // Valid charset edge cases.
    let ok = unique("A.z_0-9");
    let _c2 = Cleanup(ok.clone());
    ShmSegment::create(&ok, 1).unwrap();
}

#[test]
fn futex_in_process() {
    let w = AtomicU32::new(5);
    assert_eq!(futex::wait(&w, 4, None), WaitResult::ValueChanged);
    assert_eq!(
        futex::wait(&w, 5, Some(Duration::from_millis(1))),
        WaitResult::TimedOut
    );
    assert_eq!(
        futex::wait(&w, 5, Some(Duration::ZERO)),
        WaitResult::TimedOut
    );
    assert_eq!(futex::wake(&w, 1), 0);

    // A thread waits until the word changes; we change it and wake.
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            while w.load(Ordering::SeqCst) == 5 {
                let _ = futex::wait(&w, 5, Some(Duration::from_secs(60)));
            }
        });
        w.store(6, Ordering::SeqCst);
        futex::wake(&w, u32::MAX);
        h.join().unwrap();
    });
}

#[test]
fn doorbell_basics() {
    use strata_shm::Doorbell;
    let d = Doorbell::new();
    assert_eq!(std::mem::size_of::<Doorbell>(), 64);
    assert_eq!(std::mem::align_of::<Doorbell>(), 64);
    // ring with no sleepers touches nothing shared.
    d.ring();
    assert_eq!(d.seq(), 0);
    assert_eq!(d.sleepers(), 0);
    // Already ready; times out when never ready (with and without spinning).
    assert!(d.wait_until(|| true, Duration::ZERO, Some(Duration::ZERO)));
    assert!(!d.wait_until(|| false, Duration::ZERO, Some(Duration::from_millis(2))));
    assert!(!d.wait_until(
        || false,
        Duration::from_millis(1),
        Some(Duration::from_millis(2))
    ));
    assert_eq!(d.sleepers(), 0);

    // Many handoffs: a waiter sleeping with no timeout is always woken.
    let flag = AtomicU32::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=2000u32 {
                assert!(d.wait_until(|| flag.load(Ordering::Acquire) >= i, Duration::ZERO, None));
            }
        });
        for _ in 1..=2000u32 {
            flag.fetch_add(1, Ordering::Release);
            d.ring();
            std::thread::yield_now();
        }
    });
    assert_eq!(d.sleepers(), 0);
}
